package winunwind

import (
	"encoding/binary"
	"fmt"
	"testing"

	"github.com/rawstack/rawstack/arch"
)

// flatImage is an image whose RVA space is one byte slice.
type flatImage []byte

func (f flatImage) ReadRVA(rva uint32, p []byte) error {
	if uint64(rva)+uint64(len(p)) > uint64(len(f)) {
		return fmt.Errorf("rva %#x+%d outside image", rva, len(p))
	}
	copy(p, f[rva:])
	return nil
}

const (
	base     = 0x140000000
	fnRVA    = 0x1000
	infoRVA  = 0x2000
	stackTop = 0x70000
)

// op encodes one unwind code slot.
func op(off uint8, code, info uint8) uint16 { return uint16(off) | uint16(code)<<8 | uint16(info)<<12 }

// unwindInfo encodes an UNWIND_INFO.
func unwindInfo(version, flags, prolog, fpreg, fpoff uint8, codes []uint16, chain *RuntimeFunction) []byte {
	b := []byte{version | flags<<3, prolog, uint8(len(codes)), fpreg | fpoff<<4}
	for _, c := range codes {
		b = binary.LittleEndian.AppendUint16(b, c)
	}
	if len(codes)%2 == 1 {
		b = append(b, 0, 0)
	}
	if chain != nil {
		b = binary.LittleEndian.AppendUint32(b, chain.Begin)
		b = binary.LittleEndian.AppendUint32(b, chain.End)
		b = binary.LittleEndian.AppendUint32(b, chain.UnwindInfo)
	}
	return b
}

// world is a hand-made process: one image with functions and unwind info,
// and a stack.
type world struct {
	img   flatImage
	fns   []RuntimeFunction
	stack []byte
	ctx   Context
}

func newWorld() *world {
	w := &world{img: make(flatImage, 0x4000), stack: make([]byte, 0x1000)}
	w.ctx.Regs.Arch = arch.AMD64
	w.ctx.Regs.R[arch.AMD64RSP] = stackTop
	return w
}

func (w *world) code(rva uint32, b ...byte) { copy(w.img[rva:], b) }

func (w *world) fn(begin, end, info uint32, ui []byte) {
	copy(w.img[info:], ui)
	w.fns = append(w.fns, RuntimeFunction{begin, end, info})
}

// put stores a 64-bit value at stack address a.
func (w *world) put(a uint64, v uint64) {
	binary.LittleEndian.PutUint64(w.stack[a-(stackTop-0x800):], v)
}

func (w *world) step(t *testing.T, pc uint64) *Context {
	t.Helper()
	u := &Unwinder{}
	fns, err := ParseFunctionTable(encodeTable(w.fns))
	if err != nil {
		t.Fatal(err)
	}
	u.Add(&Module{Base: base, Size: uint64(len(w.img)), Functions: fns, Image: w.img})
	c := w.ctx
	c.Regs.R[arch.AMD64RIP] = pc
	mem := &arch.StackCopy{Addr: stackTop - 0x800, Data: w.stack}
	if err := u.Step(&c, mem); err != nil {
		t.Fatalf("step at %#x: %v", pc, err)
	}
	return &c
}

func encodeTable(fns []RuntimeFunction) []byte {
	var b []byte
	for _, f := range fns {
		b = binary.LittleEndian.AppendUint32(b, f.Begin)
		b = binary.LittleEndian.AppendUint32(b, f.End)
		b = binary.LittleEndian.AppendUint32(b, f.UnwindInfo)
	}
	return b
}

func expect(t *testing.T, c *Context, reg int, want uint64) {
	t.Helper()
	if got := c.Regs.R[reg]; got != want {
		t.Errorf("register %d = %#x, want %#x", reg, got, want)
	}
}

const ret = 0x140001234 // a return address in the caller

func TestLeafWithoutPdata(t *testing.T) {
	w := newWorld()
	w.put(stackTop, ret)
	c := w.step(t, base+0x3000)
	expect(t, c, arch.AMD64RIP, ret)
	expect(t, c, arch.AMD64RSP, stackTop+8)
}

// Prolog: push rbx (1 byte: 53); push r12 (2: 41 54); sub rsp,0x28 (4).
func pushAllocWorld() *world {
	w := newWorld()
	w.fn(fnRVA, fnRVA+0x40, infoRVA, unwindInfo(1, 0, 7, 0, 0, []uint16{
		op(7, uwopAllocSmall, 4), // 0x28 = 4*8+8
		op(3, uwopPushNonvol, 12),
		op(1, uwopPushNonvol, 3),
	}, nil))
	w.code(fnRVA, 0x53, 0x41, 0x54, 0x48, 0x83, 0xEC, 0x28, 0x90)
	sp := uint64(stackTop)
	w.put(sp+0x28, 0xC12)    // saved r12
	w.put(sp+0x30, 0xB8)     // saved rbx
	w.put(sp+0x38, ret)      // return address
	w.ctx.Regs.R[3] = 0xDEAD // rbx (DWARF 3)
	return w
}

func TestPushNonvolAllocSmall(t *testing.T) {
	w := pushAllocWorld()
	c := w.step(t, base+fnRVA+0x10) // body
	expect(t, c, arch.AMD64RIP, ret)
	expect(t, c, arch.AMD64RSP, stackTop+0x40)
	expect(t, c, arch.AMD64RBX, 0xB8)
	expect(t, c, 12, 0xC12)
}

func TestInsideProlog(t *testing.T) {
	// After "push rbx; push r12", before the sub: RSP points at r12.
	w := pushAllocWorld()
	w.ctx.Regs.R[arch.AMD64RSP] = stackTop + 0x28
	c := w.step(t, base+fnRVA+3)
	expect(t, c, arch.AMD64RIP, ret)
	expect(t, c, arch.AMD64RSP, stackTop+0x40)
	expect(t, c, arch.AMD64RBX, 0xB8)
	expect(t, c, 12, 0xC12)
	// At the first instruction nothing has run.
	w.ctx.Regs.R[arch.AMD64RSP] = stackTop + 0x38
	c = w.step(t, base+fnRVA)
	expect(t, c, arch.AMD64RIP, ret)
	expect(t, c, arch.AMD64RBX, 0xDEAD)
}

func TestAllocLarge(t *testing.T) {
	for _, tc := range []struct {
		name  string
		codes []uint16
		size  uint64
	}{
		{"scaled", []uint16{op(8, uwopAllocLarge, 0), 0x200 / 8}, 0x200},
		{"unscaled", []uint16{op(8, uwopAllocLarge, 1), 0x0008, 0x0001}, 0x10008},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := newWorld()
			w.stack = make([]byte, 0x20000)
			w.fn(fnRVA, fnRVA+0x40, infoRVA, unwindInfo(1, 0, 8, 0, 0, tc.codes, nil))
			w.ctx.Regs.R[arch.AMD64RSP] = stackTop - 0x10000
			mem := &arch.StackCopy{Addr: stackTop - 0x10800, Data: make([]byte, 0x20000)}
			binary.LittleEndian.PutUint64(mem.Data[stackTop-0x10000+tc.size-mem.Addr:], ret)
			u := &Unwinder{}
			u.Add(&Module{Base: base, Size: uint64(len(w.img)), Functions: w.fns, Image: w.img})
			c := w.ctx
			c.Regs.R[arch.AMD64RIP] = base + fnRVA + 0x20
			if err := u.Step(&c, mem); err != nil {
				t.Fatal(err)
			}
			expect(t, &c, arch.AMD64RIP, ret)
			expect(t, &c, arch.AMD64RSP, stackTop-0x10000+tc.size+8)
		})
	}
}

// Prolog: push rbp; sub rsp,0x40; lea rbp,[rsp+0x20]; mov [rbp+...]...
// with SET_FPREG, frame offset 2 (0x20), SAVE_NONVOL and SAVE_XMM128
// relative to the establisher frame.
func TestSetFPRegSaves(t *testing.T) {
	for _, far := range []bool{false, true} {
		t.Run(fmt.Sprint("far=", far), func(t *testing.T) {
			w := newWorld()
			saveRSI := []uint16{op(14, uwopSaveNonvol, 6), 0x08 / 8}
			saveXMM := []uint16{op(20, uwopSaveXMM128, 6), 0x10 / 16}
			if far {
				saveRSI = []uint16{op(14, uwopSaveNonvolFar, 6), 0x08, 0}
				saveXMM = []uint16{op(20, uwopSaveXMM128Far, 6), 0x10, 0}
			}
			codes := append(append(append([]uint16{}, saveXMM...), saveRSI...),
				op(9, uwopSetFPReg, 0), op(5, uwopAllocSmall, 7), op(1, uwopPushNonvol, 5))
			w.fn(fnRVA, fnRVA+0x80, infoRVA, unwindInfo(1, 0, 24, 5, 2, codes, nil))
			// Function RSP after prolog: S. push rbp at S+0x40, ret at S+0x48.
			// The body moved RSP (alloca): RSP is now S-0x100; RBP = S+0x20.
			S := uint64(stackTop)
			w.ctx.Regs.R[arch.AMD64RSP] = S - 0x100
			w.ctx.Regs.R[arch.AMD64RBP] = S + 0x20
			w.put(S+0x08, 0x5151) // saved rsi
			w.put(S+0x10, 0x1111) // saved xmm6 low
			w.put(S+0x18, 0x2222) // saved xmm6 high
			w.put(S+0x40, 0xB0B0) // saved rbp
			w.put(S+0x48, ret)
			c := w.step(t, base+fnRVA+0x30)
			expect(t, c, arch.AMD64RIP, ret)
			expect(t, c, arch.AMD64RSP, S+0x50)
			expect(t, c, arch.AMD64RBP, 0xB0B0)
			expect(t, c, arch.AMD64RSI, 0x5151)
			if c.XMMMask != 1<<6 || binary.LittleEndian.Uint64(c.XMM[6][:]) != 0x1111 || binary.LittleEndian.Uint64(c.XMM[6][8:]) != 0x2222 {
				t.Errorf("xmm6 %x mask %#x", c.XMM[6], c.XMMMask)
			}
		})
	}
}

func TestPushMachFrame(t *testing.T) {
	for _, errCode := range []uint8{0, 1} {
		t.Run(fmt.Sprint("errcode=", errCode), func(t *testing.T) {
			w := newWorld()
			// An interrupt handler: machine frame, then push rax.
			w.fn(fnRVA, fnRVA+0x40, infoRVA, unwindInfo(1, 0, 1, 0, 0, []uint16{
				op(1, uwopPushNonvol, 0),
				op(0, uwopPushMachFrame, errCode),
			}, nil))
			S := uint64(stackTop)
			w.put(S, 0xAA) // saved rax
			fr := S + 8 + 8*uint64(errCode)
			w.put(fr, 0x140003333)   // interrupted RIP
			w.put(fr+24, 0x12345670) // interrupted RSP
			c := w.step(t, base+fnRVA+0x10)
			expect(t, c, arch.AMD64RAX, 0xAA)
			expect(t, c, arch.AMD64RIP, 0x140003333)
			expect(t, c, arch.AMD64RSP, 0x12345670)
		})
	}
}

// A function split in two (shrink-wrapping, hot/cold): the second part's
// unwind info chains to the first's.
func TestChainedInfo(t *testing.T) {
	w := newWorld()
	primary := RuntimeFunction{fnRVA, fnRVA + 0x20, infoRVA}
	w.fn(primary.Begin, primary.End, primary.UnwindInfo, unwindInfo(1, 0, 5, 0, 0, []uint16{
		op(5, uwopAllocSmall, 3), // 0x20
		op(1, uwopPushNonvol, 3),
	}, nil))
	// Cold part: pushes rdi more, chains to the primary.
	w.fn(fnRVA+0x100, fnRVA+0x140, infoRVA+0x100, unwindInfo(1, unwFlagChainInfo, 0, 0, 0, []uint16{
		op(0, uwopSaveNonvol, 7), 0x18 / 8,
	}, &primary))
	S := uint64(stackTop)
	w.put(S+0x18, 0xD1)
	w.put(S+0x20, 0xB8)
	w.put(S+0x28, ret)
	c := w.step(t, base+fnRVA+0x110)
	expect(t, c, arch.AMD64RIP, ret)
	expect(t, c, arch.AMD64RSP, S+0x30)
	expect(t, c, arch.AMD64RBX, 0xB8)
	expect(t, c, arch.AMD64RDI, 0xD1)
}

// Version 2 info with EPILOG codes ahead of the prolog codes.
func TestVersion2EpilogCodes(t *testing.T) {
	w := pushAllocWorld()
	w.fns = nil
	w.fn(fnRVA, fnRVA+0x40, infoRVA, unwindInfo(2, 0, 7, 0, 0, []uint16{
		op(6, uwopEpilog, 1), 0, // epilog of 6 bytes at the end of the function
		op(7, uwopAllocSmall, 4),
		op(3, uwopPushNonvol, 12),
		op(1, uwopPushNonvol, 3),
	}, nil))
	c := w.step(t, base+fnRVA+0x10)
	expect(t, c, arch.AMD64RIP, ret)
	expect(t, c, arch.AMD64RSP, stackTop+0x40)
	expect(t, c, arch.AMD64RBX, 0xB8)
	expect(t, c, 12, 0xC12)
}

// A PC inside the epilog "add rsp,0x28; pop r12; pop rbx; ret" is unwound
// by emulating the rest of it, whatever the unwind codes say.
func TestEpilog(t *testing.T) {
	epi := []byte{0x48, 0x83, 0xC4, 0x28, 0x41, 0x5C, 0x5B, 0xC3}
	for _, tc := range []struct {
		at int    // offset into the epilog
		sp uint64 // RSP there
	}{{0, stackTop}, {4, stackTop + 0x28}, {6, stackTop + 0x30}, {7, stackTop + 0x38}} {
		w := pushAllocWorld()
		w.code(fnRVA+0x30, epi...)
		w.ctx.Regs.R[arch.AMD64RSP] = tc.sp
		w.ctx.Regs.R[12] = 0x777
		c := w.step(t, base+fnRVA+0x30+uint64(tc.at))
		expect(t, c, arch.AMD64RIP, ret)
		expect(t, c, arch.AMD64RSP, stackTop+0x40)
		if tc.at <= 6 {
			expect(t, c, arch.AMD64RBX, 0xB8)
		}
		if tc.at <= 4 {
			expect(t, c, 12, 0xC12)
		}
	}
	// lea rsp,[rbp+0x10]; pop rbp; ret
	w := newWorld()
	w.fn(fnRVA, fnRVA+0x40, infoRVA, unwindInfo(1, 0, 4, 5, 0, []uint16{op(4, uwopSetFPReg, 0), op(1, uwopPushNonvol, 5)}, nil))
	w.code(fnRVA+0x20, 0x48, 0x8D, 0x65, 0x10, 0x5D, 0xC3)
	w.ctx.Regs.R[arch.AMD64RBP] = stackTop - 0x10
	w.put(stackTop, 0xB0)
	w.put(stackTop+8, ret)
	c := w.step(t, base+fnRVA+0x20)
	expect(t, c, arch.AMD64RIP, ret)
	expect(t, c, arch.AMD64RBP, 0xB0)
	expect(t, c, arch.AMD64RSP, stackTop+0x10)
}

func TestUnwindChain(t *testing.T) {
	// Two frames: pushAllocWorld's function returns into a leaf-less
	// address of the same image (no pdata), which returns to 0.
	w := pushAllocWorld()
	const mid = base + 0x3000
	w.put(stackTop+0x38, mid)
	w.put(stackTop+0x40, 0)
	u := &Unwinder{}
	u.Add(&Module{Base: base, Size: uint64(len(w.img)), Functions: w.fns, Image: w.img})
	regs := w.ctx.Regs
	regs.R[arch.AMD64RIP] = base + fnRVA + 0x10
	pcs := u.Unwind(&regs, &arch.StackCopy{Addr: stackTop - 0x800, Data: w.stack}, nil)
	if len(pcs) != 2 || pcs[0] != base+fnRVA+0x10 || pcs[1] != mid {
		t.Errorf("pcs %#x", pcs)
	}
}
