package winunwind

import (
	"encoding/binary"
	"testing"

	"github.com/rawstack/rawstack/arch"
)

// FuzzStep runs Step and Walk over arbitrary UNWIND_INFO bytes, code
// bytes and stack contents (a pattern, the function's address at the
// stack pointer, then the fuzzed bytes). Seeds are the hand-made records
// of the unit tests; a step must move RSP up or fail, a walk stay within
// its budget.
func FuzzStep(f *testing.F) {
	f.Add(unwindInfo(1, 0, 7, 0, 0, []uint16{op(7, uwopAllocSmall, 4), op(3, uwopPushNonvol, 12), op(1, uwopPushNonvol, 3)}, nil),
		[]byte{0x48, 0x83, 0xC4, 0x28, 0x41, 0x5C, 0x5B, 0xC3}, uint16(0x10), []byte(nil))
	f.Add(unwindInfo(1, 0, 24, 5, 2, []uint16{op(20, uwopSaveXMM128Far, 6), 0x10, 0, op(14, uwopSaveNonvol, 6), 1, op(9, uwopSetFPReg, 0)}, nil),
		[]byte{0x48, 0x8D, 0x65, 0x10, 0x5D, 0xC3}, uint16(0x30), []byte(nil))
	f.Add(unwindInfo(1, unwFlagChainInfo, 0, 0, 0, []uint16{op(0, uwopSaveNonvol, 7), 3}, &RuntimeFunction{fnRVA, fnRVA + 0x20, infoRVA}),
		[]byte{0xEB, 0xFE}, uint16(0), []byte(nil))
	f.Add(unwindInfo(2, 0, 1, 0, 0, []uint16{op(6, uwopEpilog, 1), 0, op(1, uwopPushNonvol, 0), op(0, uwopPushMachFrame, 1)}, nil),
		[]byte{0xE9, 0, 0, 0, 0}, uint16(2), []byte(nil))
	// A machine frame whose saved RSP is the callee's own.
	mach := make([]byte, 0x18)
	binary.LittleEndian.PutUint64(mach[0x10:], 0x10000)
	f.Add(unwindInfo(1, 0, 0, 0, 0, []uint16{op(0, uwopPushMachFrame, 0)}, nil), []byte{0x90}, uint16(0x10), mach)
	f.Fuzz(func(t *testing.T, info, code []byte, pcOff uint16, stackBytes []byte) {
		img := make(flatImage, 0x3000)
		copy(img[infoRVA:], info)
		copy(img[fnRVA:fnRVA+0x100], code)
		stack := make([]byte, 0x400)
		for i := range stack {
			stack[i] = byte(i * 7)
		}
		binary.LittleEndian.PutUint64(stack, base+fnRVA)
		copy(stack[8:], stackBytes)
		u := &Unwinder{}
		u.Add(&Module{Base: base, Size: uint64(len(img)), Functions: []RuntimeFunction{{fnRVA, fnRVA + 0x100, infoRVA}}, Image: img})
		var start Context
		start.Regs.R[arch.AMD64RIP] = base + fnRVA + uint64(pcOff%0x100)
		start.Regs.R[arch.AMD64RSP] = 0x10000
		start.Regs.R[arch.AMD64RBP] = 0x10100
		mem := &arch.StackCopy{Addr: 0x10000, Data: stack}

		// A step moves RSP up (the caller's frame is above the
		// callee's) or stops with an error, and gives the same answer
		// every time.
		c := start
		err := u.Step(&c, mem)
		if err == nil && c.Regs.R[arch.AMD64RSP] <= start.Regs.R[arch.AMD64RSP] {
			t.Fatalf("step succeeded with rsp %#x, not above %#x", c.Regs.R[arch.AMD64RSP], start.Regs.R[arch.AMD64RSP])
		}
		again := start
		if err2 := u.Step(&again, mem); again != c || (err == nil) != (err2 == nil) {
			t.Fatalf("two steps from one context differ: %+v (%v) and %+v (%v)", c, err, again, err2)
		}
		// A walk stops within its frame budget, each frame above the
		// one before.
		c = start
		pcs, stop := u.Walk(&c, mem, nil, 16)
		if len(pcs) > 16 || (len(pcs) == 16) != (stop == arch.StopMaxFrames) {
			t.Fatalf("walk of max 16 returned %d frames, stop %v", len(pcs), stop)
		}
		if len(pcs) == 0 || pcs[0] != start.Regs.R[arch.AMD64RIP] {
			t.Fatalf("walk's first frame %#x, want the start pc %#x", pcs, start.Regs.R[arch.AMD64RIP])
		}

		ui, err := DecodeUnwindInfo(info)
		if err == nil && (len(info) < 4 || len(ui.Codes) != int(info[2]) || 4+2*len(ui.Codes) > len(info)) {
			t.Fatalf("%d unwind codes decoded from %d bytes declaring %d", len(ui.Codes), len(info), info[2])
		}
	})
}

// FuzzARM64 decodes arbitrary .xdata and packed words and unwinds through
// them from a fuzzed frame pointer. Decoded counts stay within the bytes
// read, and a step keeps or raises SP, changes SP or PC, or fails.
func FuzzARM64(f *testing.F) {
	f.Add([]byte{0x10, 0x00, 0x40, 0x08, 0x0a, 0x00, 0x00, 0x00, 0xE1, 0x81, 0xE6, 0xE6, 0x26, 0xE4, 0xE3, 0xE3}, uint32(0x1234567), uint16(8), uint16(0x1800))
	f.Add([]byte{0x12, 0x00, 0x20, 0x10, 0xc1, 0x39, 0xe3, 0xe3, 0x41, 0xd4, 0x03, 0xe4}, uint32(0x10C20041), uint16(40), uint16(0x1800))
	// set_fp with a frame pointer below the stack pointer.
	f.Add([]byte{0x10, 0x00, 0x40, 0x08, 0x0a, 0x00, 0x00, 0x00, 0xE1, 0xE4, 0xE3, 0xE3}, uint32(0x1234567), uint16(0x20), uint16(0x800))
	f.Fuzz(func(t *testing.T, xdata []byte, packed uint32, pcOff, fpOff uint16) {
		img := make(flatImage, 0x3000)
		copy(img[0x2000:], xdata)
		if x, err := DecodeARM64XData(img, 0x2000); err == nil {
			// Every epilog scope and code word was read from the
			// 0x1000 bytes after the record's header.
			n := 4 + len(x.Codes)
			if !x.E {
				n += 4 * len(x.Epilogs)
			}
			if n > 0x1000 || len(x.Codes)%4 != 0 || len(x.Codes) > 4*0xFF {
				t.Fatalf("%d epilogs and %d code bytes decoded from a 0x1000-byte region", len(x.Epilogs), len(x.Codes))
			}
			for _, e := range x.Epilogs {
				ops, _ := DecodeARM64Codes(x.Codes, e.StartIndex)
				if len(ops) > max(0, len(x.Codes)-e.StartIndex) {
					t.Fatalf("%d ops from %d code bytes", len(ops), len(x.Codes)-e.StartIndex)
				}
			}
		}
		if ops := DecodeARM64Packed(packed).Ops(); len(ops) > 32 {
			t.Fatalf("packed %#x: %d ops", packed, len(ops))
		}
		stack := sparseMem{}
		for a := uint64(0xF000); a < 0x11000; a += 8 {
			stack.put(a, a*3)
		}
		for _, fn := range []ARM64Function{{0x1000, 0x2000}, {0x1000, packed | 1}} {
			u := &ARM64Unwinder{}
			u.Add(&ARM64Module{Base: 0x10000, Size: 0x3000, Functions: []ARM64Function{fn}, Image: img})
			var start arch.Regs
			start.R[arch.ARM64PC] = 0x11000 + uint64(pcOff%0x200)
			start.R[arch.ARM64SP] = 0x10000
			start.R[arch.ARM64FP] = 0xF000 + uint64(fpOff%0x2000)
			start.R[arch.ARM64LR] = 0x11100
			regs := start
			err := u.Step(&regs, stack)
			sp, nsp := start.R[arch.ARM64SP], regs.R[arch.ARM64SP]
			if err == nil && (nsp < sp || nsp == sp && regs.R[arch.ARM64PC] == start.R[arch.ARM64PC]) {
				t.Fatalf("step succeeded from sp %#x pc %#x to sp %#x pc %#x", sp, start.R[arch.ARM64PC], nsp, regs.R[arch.ARM64PC])
			}
			again := start
			if err2 := u.Step(&again, stack); again != regs || (err == nil) != (err2 == nil) {
				t.Fatalf("two steps from one state differ: %v (%v) and %v (%v)", regs, err, again, err2)
			}
		}
	})
}
