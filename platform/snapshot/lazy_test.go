package snapshot

import (
	"runtime"
	"testing"

	"github.com/rawstack/rawstack/arch"
)

// TestLazyOutlivesCache drops the cache and file information of a lazily
// read library and collects garbage while its lazy table is still in use,
// as a snapshot's unwinder uses it after Process's own cache is gone: the
// mapping the table reads must stay mapped (it did not, once, and a
// collection mid-snapshot crashed).
func TestLazyOutlivesCache(t *testing.T) {
	const path = "/lib/x86_64-linux-gnu/libc.so.6"
	cache := NewTableCache()
	fi, err := cache.file(path)
	if err != nil {
		t.Skipf("%s: %v", path, err)
	}
	l := fi.lazy
	if l == nil {
		t.Fatalf("%s is not read lazily", path)
	}
	pc, _ := l.entry(l.count / 2)
	cache, fi = nil, nil
	for i := 0; i < 3; i++ {
		runtime.GC()
	}
	if r := l.rule(pc); r.CFA == arch.CFANone {
		t.Errorf("no rule at %#x, the start of an FDE", pc)
	}
	runtime.KeepAlive(cache)
}
