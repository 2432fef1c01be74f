package arch_test

import (
	"encoding/binary"
	"fmt"

	"github.com/rawstack/rawstack/arch"
)

// An .eh_frame for two functions: f at 0x401000 pushes one word (CFA =
// rsp+16 after its first byte); the outermost function at 0x401100 marks
// its return address undefined, as _start does.
var ehFrame = []byte{
	// CIE: "zR", code align 1, data align -8, RA column 16, absolute
	// 8-byte pointers; CFA = rsp+8, rip at CFA-8.
	0x14, 0, 0, 0, 0, 0, 0, 0, 0x01, 'z', 'R', 0, 0x01, 0x78, 0x10, 0x01, 0x04,
	0x0c, 0x07, 0x08, 0x90, 0x01, 0, 0,
	// FDE for [0x401000, 0x401100): advance 1; CFA offset 16.
	0x1c, 0, 0, 0, 0x1c, 0, 0, 0, 0x00, 0x10, 0x40, 0, 0, 0, 0, 0, 0x00, 0x01, 0, 0, 0, 0, 0, 0, 0x00,
	0x41, 0x0e, 0x10, 0, 0, 0, 0,
	// FDE for [0x401100, 0x401200): rip undefined.
	0x1c, 0, 0, 0, 0x3c, 0, 0, 0, 0x00, 0x11, 0x40, 0, 0, 0, 0, 0, 0x00, 0x01, 0, 0, 0, 0, 0, 0, 0x00,
	0x07, 0x10, 0, 0, 0, 0, 0, 0, 0, 0, 0,
}

func ExampleUnwinder() {
	tab, err := arch.NewTable(arch.Sections{Arch: arch.AMD64, EHFrame: ehFrame, EHFrameAddr: 0x2000})
	if err != nil {
		panic(err)
	}
	// The module is loaded 0x10000000 above its link-time addresses.
	const bias = 0x10000000
	mods := &arch.Modules{}
	mods.Add(arch.Module{Start: bias + 0x400000, End: bias + 0x402000, Bias: bias, Table: tab})

	// A stack copy: f (stopped at 0x401010) was called from 0x401150 in
	// the outermost function; f's frame holds one pushed word and the
	// return address.
	stack := &arch.StackCopy{Addr: 0x7ffe0000, Data: make([]byte, 64)}
	binary.LittleEndian.PutUint64(stack.Data[8:], bias+0x401150)
	var regs arch.Regs
	regs.Arch = arch.AMD64
	regs.Set(arch.AMD64RIP, bias+0x401010)
	regs.Set(arch.AMD64RSP, 0x7ffe0000)

	u := arch.NewUnwinder(mods)
	pcs := u.Unwind(&regs, stack, nil)
	for _, pc := range pcs {
		fmt.Printf("%#x\n", pc-bias)
	}
	fmt.Println(u.Stop)
	// Output:
	// 0x401010
	// 0x401150
	// outermost frame
}
