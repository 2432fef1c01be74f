package crc

import (
	"hash/crc32"
	"math/rand/v2"
	"testing"
)

// TestAgainstHashCRC32 checks both sums, whole and continued from a split
// point, against hash/crc32 for every length up to 300 bytes at every
// alignment up to 8, and for a megabyte.
func TestAgainstHashCRC32(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	buf := make([]byte, 1<<20+8)
	for i := range buf {
		buf[i] = byte(r.Uint32())
	}
	cast := crc32.MakeTable(crc32.Castagnoli)
	check := func(p []byte) {
		t.Helper()
		if got, want := Castagnoli(0, p), crc32.Checksum(p, cast); got != want {
			t.Fatalf("Castagnoli of %d bytes: %#x, hash/crc32 %#x", len(p), got, want)
		}
		if got, want := IEEE(0, p), crc32.ChecksumIEEE(p); got != want {
			t.Fatalf("IEEE of %d bytes: %#x, hash/crc32 %#x", len(p), got, want)
		}
		cut := len(p) / 3
		if got, want := Castagnoli(Castagnoli(0, p[:cut]), p[cut:]), crc32.Checksum(p, cast); got != want {
			t.Fatalf("Castagnoli of %d bytes continued at %d: %#x, want %#x", len(p), cut, got, want)
		}
		if got, want := IEEE(IEEE(0, p[:cut]), p[cut:]), crc32.ChecksumIEEE(p); got != want {
			t.Fatalf("IEEE of %d bytes continued at %d: %#x, want %#x", len(p), cut, got, want)
		}
	}
	for off := 0; off < 8; off++ {
		for n := 0; n <= 300; n++ {
			check(buf[off : off+n])
		}
	}
	check(buf[3 : 1<<20+3])
}

// TestPortable checks the table code that other architectures (and
// amd64 CPUs without SSE4.2) use against hash/crc32.
func TestPortable(t *testing.T) {
	tab := makeSlicing8(castagnoliPoly)
	cast := crc32.MakeTable(crc32.Castagnoli)
	p := make([]byte, 1000)
	for i := range p {
		p[i] = byte(i*7 + i>>3)
	}
	for n := 0; n <= len(p); n += 37 {
		if got, want := update(0, tab, p[:n]), crc32.Checksum(p[:n], cast); got != want {
			t.Fatalf("slicing-by-8 CRC-32C of %d bytes: %#x, want %#x", n, got, want)
		}
	}
}

func BenchmarkCastagnoli64K(b *testing.B) {
	p := make([]byte, 64<<10)
	b.SetBytes(int64(len(p)))
	for b.Loop() {
		Castagnoli(0, p)
	}
}

func BenchmarkHashCRC32Castagnoli64K(b *testing.B) {
	p := make([]byte, 64<<10)
	tab := crc32.MakeTable(crc32.Castagnoli)
	b.SetBytes(int64(len(p)))
	for b.Loop() {
		crc32.Checksum(p, tab)
	}
}
