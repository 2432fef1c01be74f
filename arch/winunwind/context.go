package winunwind

import (
	"encoding/binary"
	"fmt"

	"github.com/rawstack/rawstack/arch"
)

// ContextSize is the size of an x64 CONTEXT record, as GetThreadContext
// fills it and minidumps store it.
const ContextSize = 0x4d0

// CONTEXT offsets (winnt.h, x64).
const (
	ctxFlags  = 0x30
	ctxRax    = 0x78 // Rax, Rcx, Rdx, Rbx, Rsp, Rbp, Rsi, Rdi, R8..R15, Rip: 8 bytes each
	ctxRip    = 0xf8
	ctxXMM0   = 0x1a0 // inside FltSave (XMM_SAVE_AREA32 at 0x100)
	ctxSegCs  = 0x38
	ctxEFlags = 0x44

	// ContextAMD64 and the parts of ContextFlags.
	ContextAMD64         = 0x100000
	ContextControl       = ContextAMD64 | 1 // Rip, Rsp, SegCs, SegSs, EFlags
	ContextInteger       = ContextAMD64 | 2
	ContextFloatingPoint = ContextAMD64 | 8
)

// ctxOrder lists the DWARF numbers of Rax..R15 in CONTEXT order.
var ctxOrder = [16]int{
	arch.AMD64RAX, arch.AMD64RCX, arch.AMD64RDX, arch.AMD64RBX,
	arch.AMD64RSP, arch.AMD64RBP, arch.AMD64RSI, arch.AMD64RDI,
	8, 9, 10, 11, 12, 13, 14, 15,
}

// DecodeContext reads an x64 CONTEXT record into c: the integer registers
// and RIP the record's ContextFlags say are present, and the XMM registers
// when it carries the floating-point state.
func DecodeContext(b []byte, c *Context) error {
	if len(b) < ContextSize {
		return fmt.Errorf("winunwind: CONTEXT of %d bytes, want %d", len(b), ContextSize)
	}
	le := binary.LittleEndian
	flags := le.Uint32(b[ctxFlags:])
	*c = Context{}
	c.Regs.Arch = arch.AMD64
	if flags&ContextAMD64 == 0 {
		// Some writers leave the flags zero; take everything.
		flags = ContextControl | ContextInteger | ContextFloatingPoint
	}
	for i, r := range ctxOrder {
		// CONTEXT_CONTROL holds Rsp (and Rip); CONTEXT_INTEGER the rest.
		if want := uint32(2); r == arch.AMD64RSP && flags&1 == 0 || r != arch.AMD64RSP && flags&want == 0 {
			continue
		}
		c.Regs.R[r] = le.Uint64(b[ctxRax+8*i:])
		c.Regs.Mask |= 1 << r
	}
	if flags&1 != 0 {
		c.Regs.R[arch.AMD64RIP] = le.Uint64(b[ctxRip:])
		c.Regs.Mask |= 1 << arch.AMD64RIP
	}
	if flags&8 != 0 {
		for i := range c.XMM {
			copy(c.XMM[i][:], b[ctxXMM0+16*i:])
		}
		c.XMMMask = 0xffff
	}
	return nil
}

// EncodeContext writes c's registers into an x64 CONTEXT record b (at
// least ContextSize bytes) with ContextFlags for control, integer and
// floating-point state.
func EncodeContext(c *Context, b []byte) error {
	if len(b) < ContextSize {
		return fmt.Errorf("winunwind: CONTEXT buffer of %d bytes, want %d", len(b), ContextSize)
	}
	le := binary.LittleEndian
	clear(b[:ContextSize])
	le.PutUint32(b[ctxFlags:], ContextControl|ContextInteger|ContextFloatingPoint)
	le.PutUint16(b[ctxSegCs:], 0x33)
	le.PutUint32(b[ctxEFlags:], 0x202)
	for i, r := range ctxOrder {
		le.PutUint64(b[ctxRax+8*i:], c.Regs.R[r])
	}
	le.PutUint64(b[ctxRip:], c.Regs.R[arch.AMD64RIP])
	for i := range c.XMM {
		copy(b[ctxXMM0+16*i:], c.XMM[i][:])
	}
	return nil
}
