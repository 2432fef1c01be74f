package winunwind

import (
	"encoding/binary"
	"errors"

	"github.com/rawstack/rawstack/arch"
)

// Walk unwinds from c, appending the PCs to pcs (leaf first) until max
// frames: with the modules' unwind data where a PC is in a known module,
// and through the frame pointer (RBP) where it is in none (JIT code, an
// image whose unwind data could not be read). It returns pcs and why it
// stopped. c is left at the last frame.
func (u *Unwinder) Walk(c *Context, mem arch.Memory, pcs []uint64, max int) ([]uint64, arch.Stop) {
	for {
		pc := c.Regs.R[arch.AMD64RIP]
		if pc == 0 {
			return pcs, arch.StopOutermost
		}
		if len(pcs) >= max {
			return pcs, arch.StopMaxFrames
		}
		pcs = append(pcs, pc)
		sp := c.Regs.R[arch.AMD64RSP]
		err := u.Step(c, mem)
		if errors.Is(err, ErrNoModule) {
			err = fpStep(c, mem)
		}
		switch {
		case err == ErrNoProgress:
			return pcs, arch.StopNoProgress
		case err != nil:
			if _, ok := err.(*UnwindError); ok { // (errors.As would allocate)
				return pcs, arch.StopNoRule
			}
			return pcs, arch.StopBadMemory
		case c.Regs.R[arch.AMD64RIP] == 0:
			return pcs, arch.StopOutermost
		case c.Regs.R[arch.AMD64RSP] <= sp:
			return pcs, arch.StopNoProgress
		}
	}
}

// fpStep unwinds one frame through the frame pointer: [rbp] is the
// caller's rbp, [rbp+8] the return address.
func fpStep(c *Context, mem arch.Memory) error {
	bp := c.Regs.R[arch.AMD64RBP]
	if bp < c.Regs.R[arch.AMD64RSP] || bp&7 != 0 {
		return arch.ErrBadAddress
	}
	var b [16]byte
	if err := mem.ReadMemory(bp, b[:]); err != nil {
		return err
	}
	c.Regs.R[arch.AMD64RBP] = binary.LittleEndian.Uint64(b[:])
	c.Regs.R[arch.AMD64RIP] = binary.LittleEndian.Uint64(b[8:])
	c.Regs.R[arch.AMD64RSP] = bp + 16
	return nil
}
