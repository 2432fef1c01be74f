package winunwind

import (
	"encoding/binary"
	"testing"

	"github.com/rawstack/rawstack/arch"
)

// FuzzStep runs Step over arbitrary UNWIND_INFO bytes, code bytes and
// stack contents. Seeds are the hand-made records of the unit tests.
func FuzzStep(f *testing.F) {
	f.Add(unwindInfo(1, 0, 7, 0, 0, []uint16{op(7, uwopAllocSmall, 4), op(3, uwopPushNonvol, 12), op(1, uwopPushNonvol, 3)}, nil),
		[]byte{0x48, 0x83, 0xC4, 0x28, 0x41, 0x5C, 0x5B, 0xC3}, uint16(0x10))
	f.Add(unwindInfo(1, 0, 24, 5, 2, []uint16{op(20, uwopSaveXMM128Far, 6), 0x10, 0, op(14, uwopSaveNonvol, 6), 1, op(9, uwopSetFPReg, 0)}, nil),
		[]byte{0x48, 0x8D, 0x65, 0x10, 0x5D, 0xC3}, uint16(0x30))
	f.Add(unwindInfo(1, unwFlagChainInfo, 0, 0, 0, []uint16{op(0, uwopSaveNonvol, 7), 3}, &RuntimeFunction{fnRVA, fnRVA + 0x20, infoRVA}),
		[]byte{0xEB, 0xFE}, uint16(0))
	f.Add(unwindInfo(2, 0, 1, 0, 0, []uint16{op(6, uwopEpilog, 1), 0, op(1, uwopPushNonvol, 0), op(0, uwopPushMachFrame, 1)}, nil),
		[]byte{0xE9, 0, 0, 0, 0}, uint16(2))
	f.Fuzz(func(t *testing.T, info, code []byte, pcOff uint16) {
		img := make(flatImage, 0x3000)
		copy(img[infoRVA:], info)
		copy(img[fnRVA:fnRVA+0x100], code)
		stack := make([]byte, 0x400)
		for i := range stack {
			stack[i] = byte(i * 7)
		}
		binary.LittleEndian.PutUint64(stack, base+fnRVA)
		u := &Unwinder{}
		u.Add(&Module{Base: base, Size: uint64(len(img)), Functions: []RuntimeFunction{{fnRVA, fnRVA + 0x100, infoRVA}}, Image: img})
		var c Context
		c.Regs.R[arch.AMD64RIP] = base + fnRVA + uint64(pcOff%0x100)
		c.Regs.R[arch.AMD64RSP] = 0x10000
		c.Regs.R[arch.AMD64RBP] = 0x10100
		mem := &arch.StackCopy{Addr: 0x10000, Data: stack}
		u.Step(&c, mem)
		DecodeUnwindInfo(info)
	})
}

// FuzzARM64 decodes arbitrary .xdata and packed words and unwinds through
// them.
func FuzzARM64(f *testing.F) {
	f.Add([]byte{0x10, 0x00, 0x40, 0x08, 0x0a, 0x00, 0x00, 0x00, 0xE1, 0x81, 0xE6, 0xE6, 0x26, 0xE4, 0xE3, 0xE3}, uint32(0x1234567), uint16(8))
	f.Add([]byte{0x12, 0x00, 0x20, 0x10, 0xc1, 0x39, 0xe3, 0xe3, 0x41, 0xd4, 0x03, 0xe4}, uint32(0x10C20041), uint16(40))
	f.Fuzz(func(t *testing.T, xdata []byte, packed uint32, pcOff uint16) {
		img := make(flatImage, 0x3000)
		copy(img[0x2000:], xdata)
		DecodeARM64XData(img, 0x2000)
		if x, err := DecodeARM64XData(img, 0x2000); err == nil {
			for _, e := range x.Epilogs {
				DecodeARM64Codes(x.Codes, e.StartIndex)
			}
		}
		DecodeARM64Packed(packed).Ops()
		stack := sparseMem{}
		for a := uint64(0xF000); a < 0x11000; a += 8 {
			stack.put(a, a*3)
		}
		for _, fn := range []ARM64Function{{0x1000, 0x2000}, {0x1000, packed | 1}} {
			u := &ARM64Unwinder{}
			u.Add(&ARM64Module{Base: 0x10000, Size: 0x3000, Functions: []ARM64Function{fn}, Image: img})
			var regs arch.Regs
			regs.R[arch.ARM64PC] = 0x11000 + uint64(pcOff%0x200)
			regs.R[arch.ARM64SP] = 0x10000
			regs.R[arch.ARM64FP] = 0x10800
			u.Step(&regs, stack)
		}
	})
}
