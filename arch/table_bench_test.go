package arch

import (
	"debug/elf"
	"testing"

	"github.com/rawstack/rawstack/internal/testbuild"
)

// BenchmarkNewTableELF builds the unwind table of libc, as a recorder does
// the first time a sample passes through it.
func BenchmarkNewTableELF(b *testing.B) {
	const path = "/usr/lib/x86_64-linux-gnu/libc.so.6"
	f, err := elf.Open(path)
	if err != nil {
		testbuild.Skip(b, "%v", err)
	}
	defer f.Close()
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		if _, err := NewTableELF(f, path); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkLazyTableELF builds libc's lazy table and looks up the rules of
// 20 functions, what a recorder's first samples through it need.
func BenchmarkLazyTableELF(b *testing.B) {
	const path = "/usr/lib/x86_64-linux-gnu/libc.so.6"
	f, err := elf.Open(path)
	if err != nil {
		testbuild.Skip(b, "%v", err)
	}
	defer f.Close()
	syms, err := f.DynamicSymbols()
	if err != nil || len(syms) < 20 {
		testbuild.Skip(b, "libc without dynamic symbols")
	}
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		t, err := NewLazyTableELF(f, path)
		if err != nil {
			b.Fatal(err)
		}
		for _, s := range syms[:20] {
			t.Lookup(s.Value)
		}
	}
}
