package arch

import (
	"debug/elf"
	"testing"
)

// BenchmarkNewTableELF builds the unwind table of libc, as a recorder does
// the first time a sample passes through it.
func BenchmarkNewTableELF(b *testing.B) {
	const path = "/usr/lib/x86_64-linux-gnu/libc.so.6"
	f, err := elf.Open(path)
	if err != nil {
		b.Skip(err)
	}
	defer f.Close()
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		if _, err := NewTableELF(f, path); err != nil {
			b.Fatal(err)
		}
	}
}
