// Package winunwind unwinds Windows x64 stacks from the images' exception
// data: .pdata RUNTIME_FUNCTION entries and the UNWIND_INFO they point to
// (.xdata), as RtlVirtualUnwind does, on any host.
//
// All unwind codes are interpreted (PUSH_NONVOL, ALLOC_LARGE/SMALL,
// SET_FPREG, SAVE_NONVOL(_FAR), SAVE_XMM128(_FAR), PUSH_MACHFRAME, and the
// version 2 EPILOG codes, which need no action), chained unwind info is
// followed, functions without a table entry are unwound as leaves, and a PC
// inside an epilogue is unwound by emulating the rest of the epilogue's
// instructions. Stack memory is read through [arch.Memory], like the other
// unwinders of rawstack; code bytes and unwind info are read from the
// image through [Image].
//
//	u := &winunwind.Unwinder{}
//	u.Add(&winunwind.Module{Base: base, Size: size, Functions: fns, Image: img})
//	ctx := winunwind.Context{Regs: regs}
//	for ctx.Regs.R[arch.AMD64RIP] != 0 {
//		if err := u.Step(&ctx, mem); err != nil { break }
//	}
package winunwind

import (
	"encoding/binary"
	"errors"
	"fmt"
	"sort"

	"github.com/rawstack/rawstack/arch"
)

// RuntimeFunction is one x64 .pdata entry: a function's RVA range and the
// RVA of its UNWIND_INFO.
type RuntimeFunction struct {
	Begin, End, UnwindInfo uint32
}

// maxChain caps how many chained UNWIND_INFO records one step follows.
const maxChain = 32

// ParseFunctionTable decodes an x64 exception directory (12-byte entries)
// and sorts it by start address.
func ParseFunctionTable(b []byte) ([]RuntimeFunction, error) {
	if len(b)%12 != 0 {
		return nil, fmt.Errorf("winunwind: function table of %d bytes is not a multiple of 12", len(b))
	}
	fns := make([]RuntimeFunction, len(b)/12)
	for i := range fns {
		fns[i] = RuntimeFunction{le32(b[i*12:]), le32(b[i*12+4:]), le32(b[i*12+8:])}
	}
	if !sort.SliceIsSorted(fns, func(i, j int) bool { return fns[i].Begin < fns[j].Begin }) {
		sort.Slice(fns, func(i, j int) bool { return fns[i].Begin < fns[j].Begin })
	}
	return fns, nil
}

// Image reads an image's bytes by RVA (pe.File implements it).
type Image interface {
	ReadRVA(rva uint32, p []byte) error
}

// Module is one loaded image.
type Module struct {
	Base      uint64
	Size      uint64
	Functions []RuntimeFunction // sorted by Begin
	Image     Image
}

// lookup returns the function entry covering rva.
func (m *Module) lookup(rva uint32) (RuntimeFunction, bool) {
	f := m.Functions
	i := sort.Search(len(f), func(i int) bool { return f[i].Begin > rva }) - 1
	if i < 0 || rva >= f[i].End {
		return RuntimeFunction{}, false
	}
	return f[i], true
}

// Unwinder holds the modules of one process. Its Step reuses scratch
// space held here, so that unwinding allocates nothing: an Unwinder is for
// one goroutine at a time.
type Unwinder struct {
	mods []*Module // sorted by Base

	st    stepper
	info  [maxUnwindInfoBytes]byte
	codes [256]uint16
	chain RuntimeFunction
	codeb [16]byte
	word  [16]byte
}

// Add adds a module.
func (u *Unwinder) Add(m *Module) {
	i := sort.Search(len(u.mods), func(i int) bool { return u.mods[i].Base > m.Base })
	u.mods = append(u.mods, nil)
	copy(u.mods[i+1:], u.mods[i:])
	u.mods[i] = m
}

func (u *Unwinder) module(pc uint64) *Module {
	i := sort.Search(len(u.mods), func(i int) bool { return u.mods[i].Base > pc }) - 1
	if i < 0 || pc-u.mods[i].Base >= u.mods[i].Size {
		return nil
	}
	return u.mods[i]
}

// Context is an x64 thread context: integer registers in DWARF numbering
// (arch.AMD64RAX..., arch.AMD64RIP) and the XMM registers.
type Context struct {
	Regs arch.Regs
	XMM  [16][16]byte
	// XMMMask bit i says XMM[i] was restored by the last Step.
	XMMMask uint16
}

// winToDWARF maps the x64 register numbers of unwind codes (and of the
// instruction encoding) to DWARF numbers.
var winToDWARF = [16]int{
	arch.AMD64RAX, arch.AMD64RCX, arch.AMD64RDX, arch.AMD64RBX,
	arch.AMD64RSP, arch.AMD64RBP, arch.AMD64RSI, arch.AMD64RDI,
	8, 9, 10, 11, 12, 13, 14, 15,
}

// Unwind codes.
const (
	uwopPushNonvol     = 0
	uwopAllocLarge     = 1
	uwopAllocSmall     = 2
	uwopSetFPReg       = 3
	uwopSaveNonvol     = 4
	uwopSaveNonvolFar  = 5
	uwopEpilog         = 6 // version 2; version 1's SAVE_XMM
	uwopSpareCode      = 7 // version 1's SAVE_XMM_FAR
	uwopSaveXMM128     = 8
	uwopSaveXMM128Far  = 9
	uwopPushMachFrame  = 10
	unwFlagChainInfo   = 4
	maxUnwindInfoBytes = 4 + 2*256 + 12
)

// ErrNoModule says the PC is in no known module.
var ErrNoModule = errors.New("winunwind: pc in no module")

// ErrNoProgress says a step's unwind data gave a caller whose stack
// pointer is not above the callee's (on arm64, where a leaf returns with
// its SP: below it, or at the same SP and PC): the stack grows down, so
// the data or the stack is corrupt, and a walk that went on would loop.
var ErrNoProgress = errors.New("winunwind: the caller's stack pointer is not above the callee's")

// UnwindError describes bad unwind data.
type UnwindError struct {
	PC  uint64
	RVA uint32 // of the UNWIND_INFO
	Msg string
}

func (e *UnwindError) Error() string {
	return fmt.Sprintf("winunwind: pc %#x: unwind info at rva %#x: %s", e.PC, e.RVA, e.Msg)
}

// UnwindInfo is a decoded UNWIND_INFO record.
type UnwindInfo struct {
	Version, Flags uint8
	SizeOfProlog   uint8
	FrameRegister  uint8 // x64 register number; 0 = none
	FrameOffset    uint8 // scaled by 16
	Codes          []uint16
	Chained        *RuntimeFunction // when Flags has UNW_FLAG_CHAININFO
	Handler        uint32           // exception handler RVA when Flags has EHANDLER/UHANDLER
}

// DecodeUnwindInfo decodes an UNWIND_INFO record from b (which may extend
// beyond it).
func DecodeUnwindInfo(b []byte) (*UnwindInfo, error) {
	ui := &UnwindInfo{}
	if err := decodeUnwindInfo(b, ui, make([]uint16, 256), new(RuntimeFunction)); err != nil {
		return nil, err
	}
	ui.Codes = append([]uint16(nil), ui.Codes...)
	return ui, nil
}

var (
	errShortUnwindInfo = errors.New("short unwind info")
	errTruncatedChain  = errors.New("truncated chained function entry")
)

// decodeUnwindInfo decodes into ui, with the codes in codes (256 slots)
// and a chained entry in chain: no allocation.
func decodeUnwindInfo(b []byte, ui *UnwindInfo, codes []uint16, chain *RuntimeFunction) error {
	if len(b) < 4 {
		return errShortUnwindInfo
	}
	*ui = UnwindInfo{
		Version:       b[0] & 7,
		Flags:         b[0] >> 3,
		SizeOfProlog:  b[1],
		FrameRegister: b[3] & 15,
		FrameOffset:   b[3] >> 4,
	}
	if ui.Version != 1 && ui.Version != 2 {
		return fmt.Errorf("unwind info version %d", ui.Version)
	}
	n := int(b[2])
	if len(b) < 4+2*n {
		return fmt.Errorf("%d unwind codes exceed the data", n)
	}
	ui.Codes = codes[:n]
	for i := range ui.Codes {
		ui.Codes[i] = binary.LittleEndian.Uint16(b[4+2*i:])
	}
	tail := b[min(len(b), 4+2*((n+1)&^1)):]
	if ui.Flags&unwFlagChainInfo != 0 {
		if len(tail) < 12 {
			return errTruncatedChain
		}
		*chain = RuntimeFunction{le32(tail), le32(tail[4:]), le32(tail[8:])}
		ui.Chained = chain
	} else if ui.Flags&3 != 0 && len(tail) >= 4 {
		ui.Handler = le32(tail)
	}
	return nil
}

// codeSlots returns how many 16-bit slots the code at codes[i] takes.
func codeSlots(code uint16, version uint8) int {
	switch code >> 8 & 15 {
	case uwopAllocLarge:
		if code>>12 == 0 {
			return 2
		}
		return 3
	case uwopSaveNonvol, uwopSaveXMM128, uwopEpilog:
		return 2
	case uwopSaveNonvolFar, uwopSaveXMM128Far, uwopSpareCode:
		return 3
	}
	return 1
}

func le32(b []byte) uint32 { return binary.LittleEndian.Uint32(b) }

type stepper struct {
	c   *Context
	mem arch.Memory
	pc  uint64
	u   *Unwinder
}

func (s *stepper) reg(win uint8) uint64 { return s.c.Regs.R[winToDWARF[win&15]] }
func (s *stepper) setReg(win uint8, v uint64) {
	d := winToDWARF[win&15]
	s.c.Regs.R[d] = v
	s.c.Regs.Mask |= 1 << d
}
func (s *stepper) sp() uint64     { return s.c.Regs.R[arch.AMD64RSP] }
func (s *stepper) setSP(v uint64) { s.setReg(4, v) }
func (s *stepper) read64(a uint64) (uint64, error) {
	b := s.u.word[:8]
	if err := s.mem.ReadMemory(a, b); err != nil {
		return 0, err
	}
	return binary.LittleEndian.Uint64(b), nil
}

// restore loads integer register win from the stack at addr.
func (s *stepper) restore(win uint8, addr uint64) error {
	v, err := s.read64(addr)
	if err != nil {
		return err
	}
	s.setReg(win, v)
	return nil
}

// Step unwinds one frame: on return c holds the caller's registers (RIP is
// the return address). It needs RIP and RSP; other registers are used when
// the unwind data refers to them. A step moves RSP up or fails: a caller
// whose RSP is not above the callee's is ErrNoProgress.
func (u *Unwinder) Step(c *Context, mem arch.Memory) error {
	sp := c.Regs.R[arch.AMD64RSP]
	if err := u.step(c, mem); err != nil {
		return err
	}
	if c.Regs.R[arch.AMD64RSP] <= sp {
		return ErrNoProgress
	}
	return nil
}

func (u *Unwinder) step(c *Context, mem arch.Memory) error {
	u.st = stepper{c: c, mem: mem, pc: c.Regs.R[arch.AMD64RIP], u: u}
	s := &u.st
	defer func() { u.st = stepper{} }() // hold no reference to the caller's memory
	c.XMMMask = 0
	m := u.module(s.pc)
	if m == nil {
		return fmt.Errorf("%w: %#x", ErrNoModule, s.pc)
	}
	rva := uint32(s.pc - m.Base)
	fn, ok := m.lookup(rva)
	if !ok {
		// A leaf function: no table entry, no stack frame, the return
		// address is at RSP.
		return s.popReturn()
	}
	mach := false
	first := true
	for depth := 0; ; depth++ {
		if depth >= maxChain {
			return &UnwindError{PC: s.pc, RVA: fn.UnwindInfo, Msg: "chained unwind info too deep"}
		}
		buf := &u.info
		b := buf[:4]
		if err := m.Image.ReadRVA(fn.UnwindInfo, b); err != nil {
			return &UnwindError{PC: s.pc, RVA: fn.UnwindInfo, Msg: err.Error()}
		}
		n := 4 + 2*((int(b[2])+1)&^1) + 12
		b = buf[:n]
		if err := m.Image.ReadRVA(fn.UnwindInfo, b); err != nil {
			// Without chain or handler data the record may end earlier.
			b = buf[:4+2*int(buf[2])]
			if err := m.Image.ReadRVA(fn.UnwindInfo, b); err != nil {
				return &UnwindError{PC: s.pc, RVA: fn.UnwindInfo, Msg: err.Error()}
			}
		}
		var uiv UnwindInfo
		ui := &uiv
		if err := decodeUnwindInfo(b, ui, u.codes[:], &u.chain); err != nil {
			return &UnwindError{PC: s.pc, RVA: fn.UnwindInfo, Msg: err.Error()}
		}

		inProlog := rva >= fn.Begin && rva-fn.Begin < uint32(ui.SizeOfProlog)
		prologOff := uint32(0xFFFFFFFF)
		if inProlog {
			prologOff = rva - fn.Begin
		} else if first && ui.Chained == nil {
			if ok, err := u.inEpilog(m, fn, rva); err != nil {
				return err
			} else if ok {
				return s.emulateEpilog(m, rva)
			}
		}
		first = false

		// The establisher frame: the frame register minus its offset once
		// the prolog has set it, else the stack pointer now.
		frame := s.sp()
		if ui.FrameRegister != 0 {
			setOff, hasSet := setFPOffset(ui)
			if hasSet && (prologOff == 0xFFFFFFFF || prologOff >= setOff) {
				frame = s.reg(ui.FrameRegister) - 16*uint64(ui.FrameOffset)
			}
		}

		codes := ui.Codes
		for i := 0; i < len(codes); {
			code := codes[i]
			slots := codeSlots(code, ui.Version)
			if i+slots > len(codes) {
				return &UnwindError{PC: s.pc, RVA: fn.UnwindInfo, Msg: fmt.Sprintf("unwind code %d truncated", i)}
			}
			off, op, info := uint32(code&0xFF), code>>8&15, uint8(code>>12)
			arg16 := uint64(0)
			arg32 := uint64(0)
			if slots >= 2 {
				arg16 = uint64(codes[i+1])
			}
			if slots >= 3 {
				arg32 = uint64(codes[i+1]) | uint64(codes[i+2])<<16
			}
			i += slots
			if op == uwopEpilog && ui.Version == 2 {
				continue // describes where epilogs are; nothing to undo
			}
			if prologOff < off {
				continue // not executed yet
			}
			switch op {
			case uwopPushNonvol:
				if err := s.restore(info, s.sp()); err != nil {
					return err
				}
				s.setSP(s.sp() + 8)
			case uwopAllocLarge:
				if info == 0 {
					s.setSP(s.sp() + arg16*8)
				} else {
					s.setSP(s.sp() + arg32)
				}
			case uwopAllocSmall:
				s.setSP(s.sp() + 8*uint64(info) + 8)
			case uwopSetFPReg:
				s.setSP(s.reg(ui.FrameRegister) - 16*uint64(ui.FrameOffset))
			case uwopSaveNonvol:
				if err := s.restore(info, frame+arg16*8); err != nil {
					return err
				}
			case uwopSaveNonvolFar:
				if err := s.restore(info, frame+arg32); err != nil {
					return err
				}
			case uwopSaveXMM128, uwopSaveXMM128Far:
				a := frame + arg16*16
				if op == uwopSaveXMM128Far {
					a = frame + arg32
				}
				if err := mem.ReadMemory(a, c.XMM[info&15][:]); err != nil {
					return err
				}
				c.XMMMask |= 1 << (info & 15)
			case uwopPushMachFrame:
				// The processor pushed SS, RSP, EFLAGS, CS, RIP (and an
				// error code when info is 1).
				base := s.sp() + 8*uint64(info)
				rip, err := s.read64(base)
				if err != nil {
					return err
				}
				rsp, err := s.read64(base + 24)
				if err != nil {
					return err
				}
				c.Regs.R[arch.AMD64RIP] = rip
				c.Regs.Mask |= 1 << arch.AMD64RIP
				s.setSP(rsp)
				mach = true
			default:
				return &UnwindError{PC: s.pc, RVA: fn.UnwindInfo, Msg: fmt.Sprintf("unknown unwind code %d", op)}
			}
		}
		if ui.Chained == nil {
			break
		}
		fn = *ui.Chained
	}
	if mach {
		return nil
	}
	return s.popReturn()
}

// setFPOffset returns the prolog offset of the SET_FPREG code.
func setFPOffset(ui *UnwindInfo) (uint32, bool) {
	for i := 0; i < len(ui.Codes); i += codeSlots(ui.Codes[i], ui.Version) {
		if ui.Codes[i]>>8&15 == uwopSetFPReg {
			return uint32(ui.Codes[i] & 0xFF), true
		}
	}
	return 0, false
}

func (s *stepper) popReturn() error {
	ra, err := s.read64(s.sp())
	if err != nil {
		return err
	}
	s.c.Regs.R[arch.AMD64RIP] = ra
	s.c.Regs.Mask |= 1 << arch.AMD64RIP
	s.setSP(s.sp() + 8)
	return nil
}

// maxEpilogBytes caps how far the epilog scanner reads and follows jumps.
const maxEpilogBytes = 64

// code reads up to n (≤ 16) code bytes at rva (fewer at the end of a
// section) into the unwinder's scratch space.
func (u *Unwinder) code(m *Module, rva uint32, n int) []byte {
	p := u.codeb[:n]
	for n > 0 {
		if m.Image.ReadRVA(rva, p[:n]) == nil {
			return p[:n]
		}
		n /= 2
	}
	return nil
}

// inEpilog says whether the code at rva is an epilog: an optional
// "add rsp, imm" or "lea rsp, [reg+disp]", pops, and a return (following
// jumps that stay inside the function).
func (u *Unwinder) inEpilog(m *Module, fn RuntimeFunction, rva uint32) (bool, error) {
	p := u.code(m, rva, 16)
	if len(p) < 1 {
		return false, nil
	}
	at := rva
	if len(p) >= 3 && p[0]&0xF8 == 0x48 {
		switch p[1] {
		case 0x81:
			if p[0] == 0x48 && p[2] == 0xC4 {
				at += 7
			} else {
				return false, nil
			}
		case 0x83:
			if p[0] == 0x48 && p[2] == 0xC4 {
				at += 4
			} else {
				return false, nil
			}
		case 0x8D:
			if p[0]&6 != 0 || p[2]>>3&7 != 4 || p[2]&7 == 4 {
				return false, nil
			}
			switch p[2] >> 6 {
			case 1:
				at += 4
			case 2:
				at += 7
			default:
				return false, nil
			}
		}
	}
	for steps := 0; steps < maxEpilogBytes; steps++ {
		p = u.code(m, at, 8)
		if len(p) == 0 {
			return false, nil
		}
		if p[0]&0xF0 == 0x40 {
			at++
			p = p[1:]
			if len(p) == 0 {
				return false, nil
			}
		}
		switch {
		case p[0] >= 0x58 && p[0] <= 0x5F:
			at++
			continue
		case p[0] == 0xC2 || p[0] == 0xC3:
			return true, nil
		case p[0] == 0xF3:
			return len(p) > 1 && p[1] == 0xC3, nil
		case p[0] == 0xE9 && len(p) >= 5:
			at = at + 5 + le32(p[1:])
		case p[0] == 0xEB && len(p) >= 2:
			at = at + 2 + uint32(int32(int8(p[1])))
		default:
			return false, nil
		}
		if at < fn.Begin || at >= fn.End {
			return false, nil
		}
	}
	return false, nil
}

// emulateEpilog runs the rest of an epilog from rva: the stack adjustment,
// the pops and the return.
func (s *stepper) emulateEpilog(m *Module, rva uint32) error {
	p := s.u.code(m, rva, 16)
	at := rva
	if len(p) >= 3 && p[0]&0xF8 == 0x48 {
		switch p[1] {
		case 0x81:
			s.setSP(s.sp() + uint64(int64(int32(le32(p[3:])))))
			at += 7
		case 0x83:
			s.setSP(s.sp() + uint64(int64(int8(p[3]))))
			at += 4
		case 0x8D:
			base := s.reg(p[2]&7 + (p[0]&1)*8)
			if p[2]>>6 == 1 {
				s.setSP(base + uint64(int64(int8(p[3]))))
				at += 4
			} else {
				s.setSP(base + uint64(int64(int32(le32(p[3:])))))
				at += 7
			}
		}
	}
	for steps := 0; steps < maxEpilogBytes; steps++ {
		p = s.u.code(m, at, 8)
		if len(p) == 0 {
			break
		}
		rex := uint8(0)
		if p[0]&0xF0 == 0x40 {
			rex = p[0] & 15
			at++
			p = p[1:]
		}
		switch {
		case p[0] >= 0x58 && p[0] <= 0x5F:
			if err := s.restore(p[0]-0x58+(rex&1)*8, s.sp()); err != nil {
				return err
			}
			s.setSP(s.sp() + 8)
			at++
			continue
		case p[0] == 0xC2 && len(p) >= 3:
			if err := s.popReturn(); err != nil {
				return err
			}
			s.setSP(s.sp() + uint64(binary.LittleEndian.Uint16(p[1:])))
			return nil
		case p[0] == 0xC3 || p[0] == 0xF3:
			return s.popReturn()
		case p[0] == 0xE9 && len(p) >= 5:
			at = at + 5 + le32(p[1:])
			continue
		case p[0] == 0xEB && len(p) >= 2:
			at = at + 2 + uint32(int32(int8(p[1])))
			continue
		}
		break
	}
	return &UnwindError{PC: s.pc, Msg: "epilog emulation ran off its instructions"}
}

// Unwind walks the stack from regs and appends the PCs to pcs, leaf first,
// until a step fails (the stack pointer stopping to grow included) or the
// return address is 0. It returns pcs.
func (u *Unwinder) Unwind(regs *arch.Regs, mem arch.Memory, pcs []uint64) []uint64 {
	c := Context{Regs: *regs}
	const maxFrames = 1024
	for n := 0; n < maxFrames; n++ {
		pc := c.Regs.R[arch.AMD64RIP]
		if pc == 0 {
			break
		}
		pcs = append(pcs, pc)
		if err := u.Step(&c, mem); err != nil {
			break
		}
	}
	return pcs
}
