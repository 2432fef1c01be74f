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
