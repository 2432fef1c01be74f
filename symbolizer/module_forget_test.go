package symbolizer

import (
	"testing"

	"github.com/rawstack/rawstack/format"
)

// TestModuleDBForget: forgetting ended processes drops their modules and
// nothing else — the kernel's and the live process's still answer.
func TestModuleDBForget(t *testing.T) {
	db := NewModuleDB()
	db.Load(&format.ModuleLoad{ID: 1, Pid: 0, Base: 0xffff0000, Size: 0x1000, Kind: format.ModuleKernel})
	db.Load(&format.ModuleLoad{ID: 2, Pid: 10, Base: 0x1000, Size: 0x1000})
	db.Load(&format.ModuleLoad{ID: 3, Pid: 11, Base: 0x1000, Size: 0x1000})
	db.Load(&format.ModuleLoad{ID: 4, Pid: 11, Base: 0x3000, Size: 0x1000})
	gone := db.Forget([]uint32{11, 0, 99})
	if len(gone) != 2 || gone[0].ID != 3 || gone[1].ID != 4 {
		t.Fatalf("forgot %v, want modules 3 and 4", gone)
	}
	if len(db.Modules()) != 2 || db.Lookup(11, 0x1000, 1) != nil {
		t.Errorf("after Forget: %d modules, pid 11 still maps 0x1000", len(db.Modules()))
	}
	if m := db.Lookup(10, 0x1000, 1); m == nil || m.ID != 2 {
		t.Errorf("pid 10's module: %v", m)
	}
	if m := db.Lookup(10, 0xffff0010, 1); m == nil || m.ID != 1 {
		t.Errorf("the kernel's module: %v", m)
	}
}
