package jitfile

import (
	"os"
	"path/filepath"
	"testing"
)

// FuzzPerfMap: any bytes parse without panicking, consume at most the
// input, and every entry's range fits the address space.
func FuzzPerfMap(f *testing.F) {
	for _, s := range []string{"node.map", "java.map"} {
		if b, err := os.ReadFile(filepath.Join("testdata", s)); err == nil {
			f.Add(b)
		}
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		n, _ := ParsePerfMap("fuzz", 0, data, func(e *PerfMapEntry) {
			if e.Addr+e.Size < e.Addr {
				t.Fatalf("wrapping range %#x+%#x", e.Addr, e.Size)
			}
		})
		if n < 0 || n > len(data) {
			t.Fatalf("consumed %d of %d", n, len(data))
		}
	})
}

// FuzzJitdump: header and records parse without panicking; record slices
// stay inside the input.
func FuzzJitdump(f *testing.F) {
	if b, err := os.ReadFile(filepath.Join("testdata", "node.dump")); err == nil {
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		h, err := ParseJitdumpHeader("fuzz", data)
		start := 40
		if err == nil && int(h.Size) <= len(data) {
			start = int(h.Size)
		}
		if start > len(data) {
			return
		}
		n, _ := ParseJitdump("fuzz", int64(start), data[start:], func(r *JitdumpRecord) {
			if uint64(len(r.Code)) > r.CodeSize || len(r.Name) > MaxName || len(r.Lines) > MaxDebugEntries {
				t.Fatalf("record %+v", r)
			}
		})
		if n < 0 || n > len(data)-start {
			t.Fatalf("consumed %d of %d", n, len(data)-start)
		}
	})
}
