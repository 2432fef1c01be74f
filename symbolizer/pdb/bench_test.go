package pdb

import (
	"testing"

	"github.com/rawstack/rawstack/symbolizer"
)

func BenchmarkSymbolize(b *testing.B) {
	fx := buildFixture(b, "msvc")
	_, start, end := textRange(b, fx.exe)
	f, err := Open(fx.pdb)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	var fr []symbolizer.Frame
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		rva := start + uint32(i*7919)%(end-start)
		fr, _ = f.Symbolize(uint64(rva), fr[:0])
	}
}
