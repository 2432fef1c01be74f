package goruntime

import (
	"os"
	"runtime"
	"testing"
	"unsafe"

	"github.com/rawstack/rawstack/format"
	"github.com/rawstack/rawstack/internal/testbuild"
)

// fakeG lays out a g, a labelMap and its labels in this process's memory
// as goLayout l describes them, and returns the g's address.
type fakeG struct {
	g, lm, list []uint64
	key, val    []byte
}

func newFakeG(goid uint64, key, val string) *fakeG {
	f := &fakeG{g: make([]uint64, 8), lm: make([]uint64, 3), list: make([]uint64, 4), key: []byte(key), val: []byte(val)}
	f.list[0], f.list[1] = uint64(uintptr(unsafe.Pointer(&f.key[0]))), uint64(len(key))
	f.list[2], f.list[3] = uint64(uintptr(unsafe.Pointer(&f.val[0]))), uint64(len(val))
	f.lm[0], f.lm[1], f.lm[2] = uint64(uintptr(unsafe.Pointer(&f.list[0]))), 1, 1
	f.g[0], f.g[1] = 0x1000, 0x2000 // stack bounds
	f.g[2] = goid
	f.g[3] = uint64(uintptr(unsafe.Pointer(&f.lm[0])))
	return f
}

func (f *fakeG) addr() uint64 { return uint64(uintptr(unsafe.Pointer(&f.g[0]))) }

// TestGoReader reads goroutines and labels from this process's memory
// through process_vm_readv, checks the stack-bound test and the label
// cache, and pins the steady state at zero allocations.
func TestGoReader(t *testing.T) {
	gs := NewSampling()
	if gs == nil {
		testbuild.Impossible(t, "g-register")
	}
	pid := uint32(os.Getpid())
	gs.gr.procs[pid] = &goProc{layout: &fakeLayout, gbuf: make([]byte, fakeLayout.span), sets: map[uint64]labelEntry{}}
	a, b := newFakeG(7, "phase", "a"), newFakeG(9, "phase", "b")
	goid, set, fresh := gs.gr.goroutine(pid, a.addr(), 0x1800)
	if goid != 7 || set != 1 || len(fresh) != 1 || fresh[0] != (format.Label{Key: "phase", Value: "a"}) {
		t.Fatalf("first: goid %d set %d labels %v", goid, set, fresh)
	}
	goid, set, fresh = gs.gr.goroutine(pid, b.addr(), 0x1800)
	if goid != 9 || set != 2 || len(fresh) != 1 || fresh[0].Value != "b" {
		t.Fatalf("second: goid %d set %d labels %v", goid, set, fresh)
	}
	if goid, set, fresh = gs.gr.goroutine(pid, a.addr(), 0x1800); goid != 7 || set != 1 || fresh != nil {
		t.Fatalf("again: goid %d set %d labels %v, want the cached set", goid, set, fresh)
	}
	// A stack pointer outside the g's stack: not this goroutine running.
	if goid, _, _ := gs.gr.goroutine(pid, a.addr(), 0x3000); goid != 0 {
		t.Errorf("sp outside the stack: goroutine %d, want 0", goid)
	}
	// An address that is not mapped fails the read, not the process.
	if goid, _, _ := gs.gr.goroutine(pid, 8, 0x1800); goid != 0 {
		t.Errorf("unmapped g: goroutine %d, want 0", goid)
	}
	// The same labels in a new map get the same set id.
	c := newFakeG(11, "phase", "a")
	if _, set, fresh := gs.gr.goroutine(pid, c.addr(), 0x1800); set != 1 || fresh != nil {
		t.Errorf("equal labels elsewhere: set %d fresh %v, want set 1", set, fresh)
	}
	allocs := testing.AllocsPerRun(1000, func() {
		gs.gr.goroutine(pid, a.addr(), 0x1800)
		gs.gr.goroutine(pid, b.addr(), 0x1800)
	})
	if allocs != 0 {
		t.Errorf("%v allocations per known goroutine, want 0", allocs)
	}
	runtime.KeepAlive(a)
	runtime.KeepAlive(b)
	runtime.KeepAlive(c)
}

// BenchmarkGoReader is the per-sample cost of a known goroutine with
// known labels: two process_vm_readv calls and two map lookups.
func BenchmarkGoReader(b *testing.B) {
	gs := NewSampling()
	if gs == nil {
		testbuild.Impossible(b, "g-register")
	}
	pid := uint32(os.Getpid())
	gs.gr.procs[pid] = &goProc{layout: &fakeLayout, gbuf: make([]byte, fakeLayout.span), sets: map[uint64]labelEntry{}}
	g := newFakeG(7, "phase", "a")
	gs.gr.goroutine(pid, g.addr(), 0x1800)
	b.ReportAllocs()
	for b.Loop() {
		gs.gr.goroutine(pid, g.addr(), 0x1800)
	}
	runtime.KeepAlive(g)
}
