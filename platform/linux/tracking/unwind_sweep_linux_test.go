//go:build linux

package tracking

import (
	"testing"

	"github.com/rawstack/rawstack/format"
	"github.com/rawstack/rawstack/platform"
)

// TestUnwindSweep checks that the unwinder forgets the tables of files
// no process maps any more, and keeps those still mapped.
func TestUnwindSweep(t *testing.T) {
	s := NewReplay(1, nil)
	uw := newUnwinder(platform.Config{Unwind: platform.UnwindDWARF})
	live := &format.ModuleLoad{Path: "/usr/lib/libkept.so", BuildID: []byte{1, 2}}
	s.procs[7] = &procState{modules: []liveModule{{id: 1, start: 0x1000, end: 0x2000, ml: live}}}
	for i := 0; i < 2*minSweep; i++ {
		uw.files[string(rune('a'+i%26))+string(rune(i))] = &unwindFile{}
	}
	uw.files[unwindKey(live)] = &unwindFile{}
	uw.sweep(s)
	if len(uw.files) != 1 || uw.files[unwindKey(live)] == nil {
		t.Fatalf("after sweep: %d files cached, want only the mapped one", len(uw.files))
	}
	if uw.sweepAt != minSweep {
		t.Errorf("next sweep at %d files, want %d", uw.sweepAt, minSweep)
	}
}

// TestUnwindKey: copies of one binary (same build id) share a table; files
// without a build id are told apart by path.
func TestUnwindKey(t *testing.T) {
	a := &format.ModuleLoad{Path: "/tmp/go-build1/b001/x.test", BuildID: []byte{9, 8, 7}}
	b := &format.ModuleLoad{Path: "/tmp/go-build2/b001/x.test", BuildID: []byte{9, 8, 7}}
	c := &format.ModuleLoad{Path: "/usr/lib/liba.so"}
	d := &format.ModuleLoad{Path: "/usr/lib/libb.so"}
	if unwindKey(a) != unwindKey(b) {
		t.Error("two copies of one build id have different keys")
	}
	if unwindKey(c) == unwindKey(d) || unwindKey(a) == unwindKey(c) {
		t.Error("different files share a key")
	}
}
