//go:build linux

package linux

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
	uw.files[live.Path+"\x00"+string(live.BuildID)] = &unwindFile{}
	uw.sweep(s)
	if len(uw.files) != 1 || uw.files[live.Path+"\x00"+string(live.BuildID)] == nil {
		t.Fatalf("after sweep: %d files cached, want only the mapped one", len(uw.files))
	}
	if uw.sweepAt != minSweep {
		t.Errorf("next sweep at %d files, want %d", uw.sweepAt, minSweep)
	}
}
