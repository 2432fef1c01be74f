package winunwind_test

import (
	"encoding/binary"
	"fmt"

	"github.com/rawstack/rawstack/arch"
	"github.com/rawstack/rawstack/arch/winunwind"
)

// image is an image's RVA space as a byte slice.
type image []byte

func (m image) ReadRVA(rva uint32, p []byte) error {
	if int(rva)+len(p) > len(m) {
		return fmt.Errorf("rva %#x out of range", rva)
	}
	copy(p, m[rva:])
	return nil
}

// Unwind one frame of a function whose prolog is "push rbx; sub rsp, 0x20".
func ExampleUnwinder_Step() {
	img := make(image, 0x3000)
	// UNWIND_INFO at 0x2000: version 1, prolog of 5 bytes, two codes:
	// at offset 5 ALLOC_SMALL 0x20 (info 3), at offset 1 PUSH_NONVOL rbx (3).
	copy(img[0x2000:], []byte{1, 5, 2, 0, 5, 0x32, 1, 0x30})
	u := &winunwind.Unwinder{}
	u.Add(&winunwind.Module{
		Base:      0x140000000,
		Size:      uint64(len(img)),
		Functions: []winunwind.RuntimeFunction{{Begin: 0x1000, End: 0x1040, UnwindInfo: 0x2000}},
		Image:     img,
	})

	// The stack: 0x20 bytes of locals, the saved rbx, the return address.
	stack := make([]byte, 0x30)
	binary.LittleEndian.PutUint64(stack[0x20:], 0xB0B)
	binary.LittleEndian.PutUint64(stack[0x28:], 0x140001234)
	mem := &arch.StackCopy{Addr: 0x7f000, Data: stack}

	var c winunwind.Context
	c.Regs.R[arch.AMD64RIP] = 0x140001010 // in the body
	c.Regs.R[arch.AMD64RSP] = 0x7f000
	if err := u.Step(&c, mem); err != nil {
		fmt.Println(err)
		return
	}
	fmt.Printf("rip %#x rsp %#x rbx %#x\n", c.Regs.R[arch.AMD64RIP], c.Regs.R[arch.AMD64RSP], c.Regs.R[arch.AMD64RBX])
	// Output: rip 0x140001234 rsp 0x7f030 rbx 0xb0b
}
