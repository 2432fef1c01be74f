package snapshot

import (
	"debug/elf"
	"runtime"
	"testing"

	"github.com/rawstack/rawstack/arch"
	"github.com/rawstack/rawstack/internal/testbuild"
)

// TestLazyOutlivesCache drops the cache and file information of a lazily
// read library and collects garbage while its lazy table, which reads the
// mapped file, is still in use, as a snapshot's unwinder uses it after
// Process's own cache is gone: the mapping must stay mapped (it did not,
// once, and a collection mid-snapshot crashed).
func TestLazyOutlivesCache(t *testing.T) {
	const path = "/lib/x86_64-linux-gnu/libc.so.6"
	f, err := elf.Open(path)
	if err != nil {
		testbuild.Skip(t, "%s: %v", path, err)
	}
	syms, err := f.DynamicSymbols()
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	var read uint64
	for _, s := range syms {
		if s.Name == "read" && elf.ST_TYPE(s.Info) == elf.STT_FUNC {
			read = s.Value
		}
	}
	cache := NewTableCache()
	fi, err := cache.file(path)
	if err != nil {
		t.Fatal(err)
	}
	if !fi.mapped {
		t.Fatalf("%s: the unwind table does not read the mapped file", path)
	}
	tab := fi.table
	cache, fi = nil, nil
	for i := 0; i < 3; i++ {
		runtime.GC()
	}
	if r := tab.Lookup(read); r.CFA == arch.CFANone {
		t.Errorf("no rule at read (%#x)", read)
	}
	runtime.KeepAlive(cache)
}
