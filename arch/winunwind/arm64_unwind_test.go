package winunwind

import (
	"encoding/binary"
	"fmt"
	"testing"

	"github.com/rawstack/rawstack/arch"
	"github.com/rawstack/rawstack/symbolizer/pe"
)

// sparseMem is a byte-addressed memory for the arm64 emulation.
type sparseMem map[uint64]byte

func (m sparseMem) ReadMemory(addr uint64, p []byte) error {
	for i := range p {
		b, ok := m[addr+uint64(i)]
		if !ok {
			return fmt.Errorf("%w: %#x", arch.ErrBadAddress, addr+uint64(i))
		}
		p[i] = b
	}
	return nil
}

func (m sparseMem) put(addr, v uint64) {
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], v)
	for i, x := range b {
		m[addr+uint64(i)] = x
	}
}

// a64State is the emulated machine: x0-x30, sp, d8-d15 (as 32+n).
type a64State struct {
	x  [64]uint64
	sp uint64
}

func callerState() a64State {
	var s a64State
	for r := range s.x {
		s.x[r] = 0xC0DE0000 + uint64(r)
	}
	s.sp = 0x100000
	return s
}

// forward runs one prolog instruction.
func (s *a64State) forward(o ARM64Op, mem sparseMem) {
	switch o.Kind {
	case A64Alloc:
		s.sp -= uint64(o.Offset)
	case A64SetFP:
		s.x[29] = s.sp
	case A64AddFP:
		s.x[29] = s.sp + uint64(o.Offset)
	case A64Save:
		addr := s.sp + uint64(o.Offset)
		if o.Writeback {
			s.sp -= uint64(o.Offset)
			addr = s.sp
		}
		mem.put(addr, s.x[o.Reg])
		if o.Reg2 >= 0 {
			mem.put(addr+8, s.x[o.Reg2])
		}
	}
}

// clobber changes every callee-saved register, as a body would.
func (s *a64State) clobber() {
	for r := 19; r <= 30; r++ {
		if r != 29 {
			s.x[r] ^= 0xFFFF
		}
	}
	for r := 32 + 8; r < 32+16; r++ {
		s.x[r] ^= 0xFFFF
	}
}

// checkUnwind runs prolog ops (in unwind order) forward for the first k
// instructions from the caller's state, unwinds at pc and checks the
// caller's sp, pc (its lr) and every register the executed part saved.
func checkUnwind(t *testing.T, u *ARM64Unwinder, pc uint64, ops []ARM64Op, k int) {
	t.Helper()
	ops, err := expandSaveNext(ops)
	if err != nil {
		t.Fatal(err)
	}
	n := countInsns(ops)
	caller := callerState()
	s := caller
	mem := sparseMem{}
	saved := map[int]bool{}
	for i := n - 1; i >= n-k; i-- {
		s.forward(ops[i], mem)
		if ops[i].Kind == A64Save {
			saved[ops[i].Reg] = true
			if ops[i].Reg2 >= 0 {
				saved[ops[i].Reg2] = true
			}
		}
	}
	fpSet := false
	for i := n - 1; i >= n-k; i-- {
		if ops[i].Kind == A64SetFP || ops[i].Kind == A64AddFP {
			fpSet = true
		}
	}
	s.clobber()
	if fpSet {
		// A body with a frame pointer may move sp (alloca).
		s.sp -= 0x40
	}
	var regs arch.Regs
	regs.Arch = arch.ARM64
	for r := 0; r <= 30; r++ {
		regs.R[r] = s.x[r]
	}
	if !saved[30] {
		regs.R[30] = caller.x[30] // lr still holds the return address
	}
	regs.R[arch.ARM64SP] = s.sp
	regs.R[arch.ARM64PC] = pc
	if err := u.Step(&regs, mem); err != nil {
		t.Fatalf("pc %#x (%d prolog instructions run): %v", pc, k, err)
	}
	if regs.R[arch.ARM64SP] != caller.sp || regs.R[arch.ARM64PC] != caller.x[30] {
		t.Errorf("pc %#x (%d run): sp %#x pc %#x, want %#x %#x", pc, k, regs.R[arch.ARM64SP], regs.R[arch.ARM64PC], caller.sp, caller.x[30])
	}
	for r := range saved {
		if r < 31 && regs.R[r] != caller.x[r] {
			t.Errorf("pc %#x (%d run): x%d = %#x, want %#x", pc, k, r, regs.R[r], caller.x[r])
		}
	}
}

// TestARM64UnwindFixture unwinds every function of the clang-built arm64
// image at every prolog position and in its body, against an emulation of
// its prolog.
func TestARM64UnwindFixture(t *testing.T) {
	exe := buildARM64(t)
	img, err := pe.Open(exe)
	if err != nil {
		t.Fatal(err)
	}
	defer img.Close()
	pdata, _ := img.ExceptionData()
	fns, err := ParseARM64FunctionTable(pdata)
	if err != nil {
		t.Fatal(err)
	}
	u := &ARM64Unwinder{}
	u.Add(&ARM64Module{Base: img.ImageBase, Size: uint64(img.SizeOfImage), Functions: fns, Image: img})
	steps := 0
	for _, fn := range fns {
		var ops []ARM64Op
		if fn.Packed() {
			ops = DecodeARM64Packed(fn.UnwindData).Ops()
		} else {
			x, err := DecodeARM64XData(img, fn.UnwindData)
			if err != nil {
				t.Fatal(err)
			}
			if ops, err = DecodeARM64Codes(x.Codes, 0); err != nil {
				t.Fatal(err)
			}
		}
		n := countInsns(ops)
		base := img.ImageBase + uint64(fn.Begin)
		for k := 0; k <= n; k++ {
			checkUnwind(t, u, base+4*uint64(k), ops, k)
			steps++
		}
		checkUnwind(t, u, base+4*uint64(n)+8, ops, n) // the body
		steps++
	}
	t.Logf("%d unwinds over %d functions", steps, len(fns))
	// A PC outside every function is a leaf: it returns to lr.
	var regs arch.Regs
	regs.R[arch.ARM64PC] = img.ImageBase + 0x10
	regs.R[arch.ARM64LR] = 0x1234
	if err := u.Step(&regs, sparseMem{}); err != nil || regs.R[arch.ARM64PC] != 0x1234 {
		t.Errorf("leaf: pc %#x, %v", regs.R[arch.ARM64PC], err)
	}
}

// TestARM64Packed checks packed shapes the fixture lacks: homed
// parameters, chained frames small and large, odd register counts.
func TestARM64Packed(t *testing.T) {
	for _, p := range []ARM64Packed{
		{Flag: 1, FunctionLength: 400, RegI: 3, CR: 1, H: true, FrameSize: 144},
		{Flag: 1, FunctionLength: 400, RegI: 0, RegF: 0, H: true, FrameSize: 64},
		{Flag: 1, FunctionLength: 400, RegI: 4, RegF: 1, CR: 3, FrameSize: 96},
		{Flag: 1, FunctionLength: 400, RegI: 1, RegF: 2, CR: 3, FrameSize: 1024},
		{Flag: 1, FunctionLength: 400, RegI: 2, CR: 3, FrameSize: 8000},
		{Flag: 1, FunctionLength: 400, RegI: 5, RegF: 7, CR: 0, FrameSize: 256},
		{Flag: 1, FunctionLength: 400, RegI: 0, RegF: 1, CR: 0, FrameSize: 32},
	} {
		t.Run(fmt.Sprintf("%+v", p), func(t *testing.T) {
			u := &ARM64Unwinder{}
			img := make(flatImage, 0x2000)
			w := uint32(p.Flag) | (p.FunctionLength/4)<<2 | uint32(p.RegF)<<13 | uint32(p.RegI)<<16 | uint32(p.CR)<<21 | (p.FrameSize/16)<<23
			if p.H {
				w |= 1 << 20
			}
			if DecodeARM64Packed(w) != p {
				t.Fatalf("round trip: %+v", DecodeARM64Packed(w))
			}
			u.Add(&ARM64Module{Base: 0x10000, Size: 0x2000, Functions: []ARM64Function{{0x1000, w}}, Image: img})
			ops := p.Ops()
			n := countInsns(ops)
			for k := 0; k <= n; k++ {
				checkUnwind(t, u, 0x11000+4*uint64(k), ops, k)
			}
		})
	}
}

// TestARM64SaveNextAndEpilog uses hand-made .xdata: a prolog with
// save_next, and an epilog scope, unwound at every epilog instruction.
func TestARM64SaveNextAndEpilog(t *testing.T) {
	// Prolog (execution order): stp x19,x20,[sp,#-48]!; stp x21,x22,[sp,#16];
	// stp x23,x24,[sp,#32]; stp x29,x30,[sp,#-16]!; mov fp,sp.
	// Unwind codes: set_fp, save_fplr_x 16, save_next, save_next,
	// save_r19r20_x 48, end.
	codes := []byte{0xE1, 0x81, 0xE6, 0xE6, 0x26, 0xE4}
	// Epilog at instruction 40: mov sp,fp; ldp x29,x30,[sp],#16; then the
	// rest shares the prolog codes from index 1.
	for len(codes)%4 != 0 {
		codes = append(codes, 0xE3)
	}
	img := make(flatImage, 0x3000)
	hdr := uint32(64/4) | 1<<22 | uint32(len(codes)/4)<<27 // one epilog scope
	binary.LittleEndian.PutUint32(img[0x2000:], hdr)
	binary.LittleEndian.PutUint32(img[0x2004:], uint32(40/4)|0<<22) // epilog at byte 40, codes from index 0
	copy(img[0x2008:], codes)
	u := &ARM64Unwinder{}
	u.Add(&ARM64Module{Base: 0x10000, Size: 0x3000, Functions: []ARM64Function{{0x1000, 0x2000}}, Image: img})
	ops, err := DecodeARM64Codes(codes, 0)
	if err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprint(render(ops, false, false)); got != "[mov fp, sp stp x29, x30, [sp, #-16]! save_next save_next stp x19, x20, [sp, #-48]! end]" {
		t.Fatalf("decoded %s", got)
	}
	n := countInsns(ops)
	for k := 0; k <= n; k++ {
		checkUnwind(t, u, 0x11000+4*uint64(k), ops, k)
	}
	// In the epilog after k instructions, the machine is as if the prolog
	// had run only its first n-k instructions (the epilog undoes them in
	// reverse), and the PC is 40+4k.
	for k := 0; k < n; k++ {
		checkUnwind(t, u, 0x11000+40+4*uint64(k), ops, n-k)
	}
}
