package winunwind

import (
	"testing"

	"github.com/rawstack/rawstack/arch"
)

// TestStepAllocs pins that Step allocates nothing (here in a function body
// with PUSH_NONVOL and ALLOC_SMALL codes): the Windows sampler unwinds
// every sample through it.
func TestStepAllocs(t *testing.T) {
	w := pushAllocWorld()
	u := &Unwinder{}
	fns, err := ParseFunctionTable(encodeTable(w.fns))
	if err != nil {
		t.Fatal(err)
	}
	u.Add(&Module{Base: base, Size: uint64(len(w.img)), Functions: fns, Image: w.img})
	mem := &arch.StackCopy{Addr: stackTop - 0x800, Data: w.stack}
	var c Context
	pcs := make([]uint64, 0, 16)
	n := testing.AllocsPerRun(100, func() {
		c = w.ctx
		c.Regs.R[arch.AMD64RIP] = base + fnRVA + 0x10
		if err := u.Step(&c, mem); err != nil {
			t.Fatal(err)
		}
	})
	if n != 0 {
		t.Errorf("%.0f allocations per step, want 0", n)
	}
	n = testing.AllocsPerRun(100, func() {
		c = w.ctx
		c.Regs.R[arch.AMD64RIP] = base + fnRVA + 0x10
		pcs, _ = u.Walk(&c, mem, pcs[:0], 16)
	})
	if n != 0 {
		t.Errorf("%.0f allocations per walk, want 0", n)
	}
}
