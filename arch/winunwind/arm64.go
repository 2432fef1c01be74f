package winunwind

import (
	"encoding/binary"
	"errors"
	"fmt"
	"sort"

	"github.com/rawstack/rawstack/arch"
)

// ARM64Function is one Windows arm64 .pdata entry (8 bytes): the function
// start RVA and either the RVA of its .xdata record (low two bits 0) or
// packed unwind data.
type ARM64Function struct {
	Begin      uint32
	UnwindData uint32
}

// Packed says whether the entry holds packed unwind data.
func (f ARM64Function) Packed() bool { return f.UnwindData&3 != 0 }

// ParseARM64FunctionTable decodes an arm64 exception directory and sorts it
// by start address.
func ParseARM64FunctionTable(b []byte) ([]ARM64Function, error) {
	if len(b)%8 != 0 {
		return nil, fmt.Errorf("winunwind: arm64 function table of %d bytes is not a multiple of 8", len(b))
	}
	fns := make([]ARM64Function, len(b)/8)
	for i := range fns {
		fns[i] = ARM64Function{le32(b[i*8:]), le32(b[i*8+4:])}
	}
	sort.SliceStable(fns, func(i, j int) bool { return fns[i].Begin < fns[j].Begin })
	return fns, nil
}

// ARM64Packed is decoded packed unwind data. Sizes are in bytes.
type ARM64Packed struct {
	Flag           uint8 // 1 packed, 2 packed fragment (no prolog)
	FunctionLength uint32
	RegF           uint8 // FP registers saved: 0 none, else RegF+1 (d8...)
	RegI           uint8 // integer registers saved (x19...)
	H              bool  // x0-x7 homed
	CR             uint8 // 0 no lr, 1 lr saved, 2 chained with pac, 3 chained
	FrameSize      uint32
}

// DecodeARM64Packed decodes the packed form of an entry's UnwindData.
func DecodeARM64Packed(u uint32) ARM64Packed {
	return ARM64Packed{
		Flag:           uint8(u & 3),
		FunctionLength: (u >> 2 & 0x7FF) * 4,
		RegF:           uint8(u >> 13 & 7),
		RegI:           uint8(u >> 16 & 15),
		H:              u>>20&1 != 0,
		CR:             uint8(u >> 21 & 3),
		FrameSize:      (u >> 23 & 0x1FF) * 16,
	}
}

// ARM64Epilog is one epilog scope of an .xdata record.
type ARM64Epilog struct {
	Start      uint32 // offset from the function start, bytes
	StartIndex int    // index of its first unwind code byte
}

// ARM64XData is a decoded .xdata record.
type ARM64XData struct {
	FunctionLength uint32 // bytes
	Version        uint8
	X              bool // has an exception handler
	E              bool // a single epilog packed in the header
	Epilogs        []ARM64Epilog
	Codes          []byte
	Handler        uint32
}

// maxARM64XData caps what one .xdata record may declare.
const maxARM64XData = 4 + 4 + 4*0xFFFF + 4*0xFF + 4

// DecodeARM64XData reads the .xdata record at rva.
func DecodeARM64XData(img Image, rva uint32) (*ARM64XData, error) {
	var h [8]byte
	if err := img.ReadRVA(rva, h[:4]); err != nil {
		return nil, err
	}
	w := le32(h[:])
	x := &ARM64XData{
		FunctionLength: (w & 0x3FFFF) * 4,
		Version:        uint8(w >> 18 & 3),
		X:              w>>20&1 != 0,
		E:              w>>21&1 != 0,
	}
	nEpi := w >> 22 & 0x1F
	nWords := w >> 27
	off := rva + 4
	if nEpi == 0 && nWords == 0 {
		if err := img.ReadRVA(off, h[4:8]); err != nil {
			return nil, err
		}
		ext := le32(h[4:])
		nEpi, nWords = ext&0xFFFF, ext>>16&0xFF
		off += 4
	}
	if x.Version != 0 {
		return nil, fmt.Errorf("arm64 xdata version %d", x.Version)
	}
	if x.E {
		// The epilog count field is the index of the single epilog's
		// codes; its start is the end of the function.
		x.Epilogs = []ARM64Epilog{{Start: 0xFFFFFFFF, StartIndex: int(nEpi)}}
	} else {
		b := make([]byte, 4*nEpi)
		if err := img.ReadRVA(off, b); err != nil {
			return nil, err
		}
		for i := uint32(0); i < nEpi; i++ {
			s := le32(b[4*i:])
			x.Epilogs = append(x.Epilogs, ARM64Epilog{Start: (s & 0x3FFFF) * 4, StartIndex: int(s >> 22)})
		}
		off += 4 * nEpi
	}
	x.Codes = make([]byte, 4*nWords)
	if err := img.ReadRVA(off, x.Codes); err != nil {
		return nil, err
	}
	off += 4 * nWords
	if x.X {
		var hb [4]byte
		if err := img.ReadRVA(off, hb[:]); err == nil {
			x.Handler = le32(hb[:])
		}
	}
	return x, nil
}

// ARM64OpKind is an arm64 unwind operation.
type ARM64OpKind uint8

const (
	A64End       ARM64OpKind = iota
	A64EndC                  // end of a chained scope
	A64Nop                   // nop
	A64Alloc                 // sub sp, sp, #Offset
	A64SetFP                 // mov fp, sp
	A64AddFP                 // add fp, sp, #Offset
	A64Save                  // str/stp of Reg (and Reg2) at [sp, #Offset], pre-indexed when Writeback
	A64SaveNext              // the next register pair after the previous save
	A64PACSignLR             // pacibsp
	A64Other                 // an operation not modelled (trap frame, context, SVE...)
)

// ARM64Op is one decoded unwind code (or one step of a packed prolog).
// Registers are numbered 0-30 for x0-x30 and 32+n for dn.
type ARM64Op struct {
	Kind      ARM64OpKind
	Reg, Reg2 int // Reg2 is -1 for a single-register save
	Offset    int // bytes
	Writeback bool
	Code      []byte // the code bytes (nil for packed data)
	// LR makes String name x30 "lr", as llvm-readobj does for packed
	// data.
	LR bool
}

const a64D = 32 // register number of d0 in ARM64Op

func regName(r int, lr bool) string {
	switch {
	case r >= a64D:
		return fmt.Sprintf("d%d", r-a64D)
	case r == 30 && lr:
		return "lr"
	}
	return fmt.Sprintf("x%d", r)
}

// String renders op as llvm-readobj --unwind does: the prolog instruction,
// or with epilog the instruction that undoes it.
func (o ARM64Op) String(epilog bool) string {
	switch o.Kind {
	case A64End:
		return "end"
	case A64EndC:
		return "end_c"
	case A64Nop:
		return "nop"
	case A64Alloc:
		if epilog {
			return fmt.Sprintf("add sp, #%d", o.Offset)
		}
		return fmt.Sprintf("sub sp, #%d", o.Offset)
	case A64SetFP:
		if epilog {
			return "mov sp, fp"
		}
		return "mov fp, sp"
	case A64AddFP:
		if epilog {
			return fmt.Sprintf("sub sp, fp, #%d", o.Offset)
		}
		return fmt.Sprintf("add fp, sp, #%d", o.Offset)
	case A64SaveNext:
		return "save_next"
	case A64PACSignLR:
		if epilog {
			return "autibsp"
		}
		return "pacibsp"
	case A64Save:
		op := "str"
		regs := regName(o.Reg, o.LR)
		if o.Reg2 >= 0 {
			op = "stp"
			regs += ", " + regName(o.Reg2, o.LR)
		}
		if epilog {
			op = "ld" + op[2:]
			if o.Writeback {
				return fmt.Sprintf("%s %s, [sp], #%d", op, regs, o.Offset)
			}
			return fmt.Sprintf("%s %s, [sp, #%d]", op, regs, o.Offset)
		}
		if o.Writeback {
			return fmt.Sprintf("%s %s, [sp, #-%d]!", op, regs, o.Offset)
		}
		return fmt.Sprintf("%s %s, [sp, #%d]", op, regs, o.Offset)
	}
	return fmt.Sprintf("unsupported %x", o.Code)
}

// errTruncated says unwind codes end in the middle of one.
var errTruncated = errors.New("truncated arm64 unwind code")

// DecodeARM64Codes decodes unwind codes from codes[start:] up to and
// including the first end or end_c.
func DecodeARM64Codes(codes []byte, start int) ([]ARM64Op, error) {
	var ops []ARM64Op
	for i := start; i < len(codes); {
		b := codes[i]
		n := arm64CodeLen(b)
		if i+n > len(codes) {
			return ops, errTruncated
		}
		c := codes[i : i+n]
		i += n
		var x uint32
		for _, v := range c {
			x = x<<8 | uint32(v)
		}
		op := ARM64Op{Reg2: -1, Code: c}
		switch {
		case b < 0x20: // alloc_s
			op.Kind, op.Offset = A64Alloc, int(b&0x1F)*16
		case b < 0x40: // save_r19r20_x
			op.Kind, op.Reg, op.Reg2, op.Offset, op.Writeback = A64Save, 19, 20, int(b&0x1F)*8, true
		case b < 0x80: // save_fplr
			op.Kind, op.Reg, op.Reg2, op.Offset = A64Save, 29, 30, int(b&0x3F)*8
		case b < 0xC0: // save_fplr_x
			op.Kind, op.Reg, op.Reg2, op.Offset, op.Writeback = A64Save, 29, 30, (int(b&0x3F)+1)*8, true
		case b < 0xC8: // alloc_m
			op.Kind, op.Offset = A64Alloc, int(x&0x7FF)*16
		case b < 0xCC: // save_regp
			op.Kind, op.Reg, op.Offset = A64Save, 19+int(x>>6&0xF), int(x&0x3F)*8
			op.Reg2 = op.Reg + 1
		case b < 0xD0: // save_regp_x
			op.Kind, op.Reg, op.Offset, op.Writeback = A64Save, 19+int(x>>6&0xF), (int(x&0x3F)+1)*8, true
			op.Reg2 = op.Reg + 1
		case b < 0xD4: // save_reg
			op.Kind, op.Reg, op.Offset = A64Save, 19+int(x>>6&0xF), int(x&0x3F)*8
		case b < 0xD6: // save_reg_x
			op.Kind, op.Reg, op.Offset, op.Writeback = A64Save, 19+int(x>>5&0xF), (int(x&0x1F)+1)*8, true
		case b < 0xD8: // save_lrpair
			op.Kind, op.Reg, op.Reg2, op.Offset = A64Save, 19+2*int(x>>6&7), 30, int(x&0x3F)*8
		case b < 0xDA: // save_fregp
			op.Kind, op.Reg, op.Offset = A64Save, a64D+8+int(x>>6&7), int(x&0x3F)*8
			op.Reg2 = op.Reg + 1
		case b < 0xDC: // save_fregp_x
			op.Kind, op.Reg, op.Offset, op.Writeback = A64Save, a64D+8+int(x>>6&7), (int(x&0x3F)+1)*8, true
			op.Reg2 = op.Reg + 1
		case b < 0xDE: // save_freg
			op.Kind, op.Reg, op.Offset = A64Save, a64D+8+int(x>>6&7), int(x&0x3F)*8
		case b == 0xDE: // save_freg_x
			op.Kind, op.Reg, op.Offset, op.Writeback = A64Save, a64D+8+int(x>>5&7), (int(x&0x1F)+1)*8, true
		case b == 0xE0: // alloc_l
			op.Kind, op.Offset = A64Alloc, int(x&0xFFFFFF)*16
		case b == 0xE1:
			op.Kind = A64SetFP
		case b == 0xE2:
			op.Kind, op.Offset = A64AddFP, int(x&0xFF)*8
		case b == 0xE3:
			op.Kind = A64Nop
		case b == 0xE4:
			op.Kind = A64End
		case b == 0xE5:
			op.Kind = A64EndC
		case b == 0xE6:
			op.Kind = A64SaveNext
		case b == 0xFC:
			op.Kind = A64PACSignLR
		default:
			op.Kind = A64Other
		}
		ops = append(ops, op)
		if op.Kind == A64End || op.Kind == A64EndC {
			break
		}
	}
	return ops, nil
}

// arm64CodeLen is the length in bytes of the unwind code starting with b.
func arm64CodeLen(b byte) int {
	switch {
	case b < 0xC0:
		return 1
	case b < 0xE0:
		return 2
	case b == 0xE0:
		return 4
	case b == 0xE2:
		return 2
	case b == 0xE7:
		return 3
	case b >= 0xF8 && b <= 0xFB:
		return int(b-0xF8) + 2
	}
	return 1
}

// expandSaveNext replaces each save_next with the save it stands for. In
// unwind order a run of save_next codes precedes the save it continues:
// the prolog saved the base pair first, then the following pairs.
func expandSaveNext(ops []ARM64Op) ([]ARM64Op, error) {
	out := make([]ARM64Op, len(ops))
	copy(out, ops)
	for i := 0; i < len(out); i++ {
		if out[i].Kind != A64SaveNext {
			continue
		}
		j := i
		for j < len(out) && out[j].Kind == A64SaveNext {
			j++
		}
		if j == len(out) || out[j].Kind != A64Save || out[j].Reg2 < 0 {
			return nil, errors.New("winunwind: arm64 save_next without a register pair to continue")
		}
		base := out[j]
		baseOff := base.Offset
		if base.Writeback {
			baseOff = 0
		}
		k := j - i
		for n := i; n < j; n++ {
			step := k - (n - i) // pairs after the base
			out[n] = ARM64Op{Kind: A64Save, Reg: base.Reg + 2*step, Reg2: base.Reg2 + 2*step, Offset: baseOff + 16*step, Code: out[n].Code}
		}
		i = j
	}
	return out, nil
}

// Ops returns the canonical prolog of packed unwind data as unwind
// operations, last prolog instruction first (the order of unwind codes),
// ending with End.
func (p ARM64Packed) Ops() []ARM64Op {
	intSZ := 8 * int(p.RegI)
	if p.CR == 1 {
		intSZ += 8
	}
	fpSZ := 0
	if p.RegF > 0 {
		fpSZ = 8 * (int(p.RegF) + 1)
	}
	h := 0
	if p.H {
		h = 1
	}
	savSZ := (intSZ + fpSZ + 8*8*h + 0xF) &^ 0xF
	locSZ := int(p.FrameSize) - savSZ
	var ops []ARM64Op
	save := func(r, r2, off int, wb bool) {
		ops = append(ops, ARM64Op{Kind: A64Save, Reg: r, Reg2: r2, Offset: off, Writeback: wb, LR: true})
	}
	if p.CR == 2 || p.CR == 3 {
		ops = append(ops, ARM64Op{Kind: A64SetFP, Reg2: -1})
		if locSZ <= 512 {
			save(29, 30, locSZ, true)
		} else {
			save(29, 30, 0, false)
		}
	}
	switch {
	case locSZ > 4080:
		ops = append(ops, ARM64Op{Kind: A64Alloc, Reg2: -1, Offset: locSZ - 4080}, ARM64Op{Kind: A64Alloc, Reg2: -1, Offset: 4080})
	case (p.CR != 3 && p.CR != 2 && locSZ > 0) || locSZ > 512:
		ops = append(ops, ARM64Op{Kind: A64Alloc, Reg2: -1, Offset: locSZ})
	}
	if p.H {
		save(6, 7, intSZ+fpSZ+48, false)
		save(4, 5, intSZ+fpSZ+32, false)
		save(2, 3, intSZ+fpSZ+16, false)
		if p.RegI > 0 || p.RegF > 0 || p.CR == 1 {
			save(0, 1, intSZ+fpSZ, false)
		} else {
			save(0, 1, savSZ, true)
		}
	}
	floatRegs := 0
	if p.RegF > 0 {
		floatRegs = int(p.RegF) + 1
	}
	for i := (floatRegs+1)/2 - 1; i >= 0; i-- {
		switch {
		case i == (floatRegs+1)/2-1 && floatRegs%2 == 1:
			save(a64D+8+2*i, -1, intSZ+16*i, false)
		case i == 0 && p.RegI == 0 && p.CR != 1:
			save(a64D+8+2*i, a64D+9+2*i, savSZ, true)
		default:
			save(a64D+8+2*i, a64D+9+2*i, intSZ+16*i, false)
		}
	}
	if p.CR == 1 && p.RegI%2 == 0 {
		if p.RegI == 0 {
			save(30, -1, savSZ, true)
		} else {
			save(30, -1, intSZ-8, false)
		}
	}
	for i := (int(p.RegI)+1)/2 - 1; i >= 0; i-- {
		switch {
		case i == (int(p.RegI)+1)/2-1 && p.RegI%2 == 1:
			r2 := -1
			if p.CR == 1 {
				r2 = 30
			}
			if i == 0 {
				save(19+2*i, r2, savSZ, true)
			} else {
				save(19+2*i, r2, 16*i, false)
			}
		case i == 0:
			save(19, 20, savSZ, true)
		default:
			save(19+2*i, 20+2*i, 16*i, false)
		}
	}
	if p.CR == 2 {
		ops = append(ops, ARM64Op{Kind: A64PACSignLR, Reg2: -1})
	}
	return append(ops, ARM64Op{Kind: A64End, Reg2: -1})
}

// ARM64Module is one loaded arm64 image.
type ARM64Module struct {
	Base      uint64
	Size      uint64
	Functions []ARM64Function // sorted by Begin
	Image     Image
}

// ARM64Unwinder unwinds Windows arm64 stacks. Registers are arch.Regs in
// arm64 DWARF numbering (x0-x30, sp 31, pc 32).
type ARM64Unwinder struct {
	mods []*ARM64Module
}

// Add adds a module.
func (u *ARM64Unwinder) Add(m *ARM64Module) {
	i := sort.Search(len(u.mods), func(i int) bool { return u.mods[i].Base > m.Base })
	u.mods = append(u.mods, nil)
	copy(u.mods[i+1:], u.mods[i:])
	u.mods[i] = m
}

// Step unwinds one frame of regs: afterwards PC holds the return address
// and SP, FP, LR and the callee-saved registers the caller's values. It
// handles packed and unpacked unwind data and a PC inside a prolog or an
// epilog; functions without an entry are leaves (return to LR). A step
// keeps SP (a leaf) or moves it up, and changes SP or PC, or fails with
// ErrNoProgress.
func (u *ARM64Unwinder) Step(regs *arch.Regs, mem arch.Memory) error {
	sp, pc := regs.R[arch.ARM64SP], regs.R[arch.ARM64PC]
	if err := u.step(regs, mem); err != nil {
		return err
	}
	if nsp := regs.R[arch.ARM64SP]; nsp < sp || nsp == sp && regs.R[arch.ARM64PC] == pc {
		return ErrNoProgress
	}
	return nil
}

func (u *ARM64Unwinder) step(regs *arch.Regs, mem arch.Memory) error {
	pc := regs.R[arch.ARM64PC]
	var m *ARM64Module
	for _, x := range u.mods {
		if pc >= x.Base && pc-x.Base < x.Size {
			m = x
		}
	}
	if m == nil {
		return fmt.Errorf("%w: %#x", ErrNoModule, pc)
	}
	rva := uint32(pc - m.Base)
	fns := m.Functions
	i := sort.Search(len(fns), func(i int) bool { return fns[i].Begin > rva }) - 1
	var ops []ARM64Op
	found := false
	if i >= 0 {
		fn := fns[i]
		off := rva - fn.Begin
		if fn.Packed() {
			p := DecodeARM64Packed(fn.UnwindData)
			if off < p.FunctionLength {
				found = true
				ops = p.Ops()
				// In the prolog (not for fragments), skip the codes of
				// instructions not yet executed.
				body := len(ops) - 1
				if p.Flag == 1 && int(off/4) < body {
					ops = ops[body-int(off/4):]
				}
			}
		} else {
			x, err := DecodeARM64XData(m.Image, fn.UnwindData)
			if err != nil {
				return &UnwindError{PC: pc, RVA: fn.UnwindData, Msg: err.Error()}
			}
			if off < x.FunctionLength {
				found = true
				if ops, err = x.opsAt(off); err != nil {
					return &UnwindError{PC: pc, RVA: fn.UnwindData, Msg: err.Error()}
				}
			}
		}
	}
	if !found {
		regs.R[arch.ARM64PC] = regs.R[arch.ARM64LR]
		return nil
	}
	return applyARM64(regs, mem, ops)
}

// opsAt returns the unwind operations that undo what has executed at
// offset off: all prolog codes in the body, the executed ones in the
// prolog, the remaining ones in an epilog.
func (x *ARM64XData) opsAt(off uint32) ([]ARM64Op, error) {
	prolog, err := DecodeARM64Codes(x.Codes, 0)
	if err != nil {
		return nil, err
	}
	for _, e := range x.Epilogs {
		start := e.Start
		if start == 0xFFFFFFFF {
			// Packed single epilog at the end: its length is its code
			// count (without the end).
			epi, err := DecodeARM64Codes(x.Codes, e.StartIndex)
			if err != nil {
				return nil, err
			}
			start = x.FunctionLength - 4*uint32(countInsns(epi))
		}
		if off >= start {
			epi, err := DecodeARM64Codes(x.Codes, e.StartIndex)
			if err != nil {
				return nil, err
			}
			n := countInsns(epi)
			k := int((off - start) / 4)
			if k < n {
				return epi[k:], nil
			}
		}
	}
	n := countInsns(prolog)
	if k := int(off / 4); k < n {
		return prolog[n-k:], nil
	}
	return prolog, nil
}

// countInsns counts the operations before the end code.
func countInsns(ops []ARM64Op) int {
	n := 0
	for _, o := range ops {
		if o.Kind == A64End || o.Kind == A64EndC {
			break
		}
		n++
	}
	return n
}

// applyARM64 undoes ops in order and returns through LR.
func applyARM64(regs *arch.Regs, mem arch.Memory, ops []ARM64Op) error {
	sp := regs.R[arch.ARM64SP]
	read := func(a uint64) (uint64, error) {
		var b [8]byte
		if err := mem.ReadMemory(a, b[:]); err != nil {
			return 0, err
		}
		return binary.LittleEndian.Uint64(b[:]), nil
	}
	set := func(r int, v uint64) {
		if r < a64D {
			regs.R[r] = v
			regs.Mask |= 1 << r
		}
	}
	ops, err := expandSaveNext(ops)
	if err != nil {
		return err
	}
	for _, o := range ops {
		switch o.Kind {
		case A64End, A64EndC:
			regs.R[arch.ARM64SP] = sp
			regs.Mask |= 1 << arch.ARM64SP
			regs.R[arch.ARM64PC] = regs.R[arch.ARM64LR]
			return nil
		case A64Nop, A64PACSignLR:
		case A64Alloc:
			sp += uint64(o.Offset)
		case A64SetFP:
			sp = regs.R[arch.ARM64FP]
		case A64AddFP:
			sp = regs.R[arch.ARM64FP] - uint64(o.Offset)
		case A64Save:
			base := sp
			if !o.Writeback {
				base += uint64(o.Offset)
			}
			v, err := read(base)
			if err != nil {
				return err
			}
			set(o.Reg, v)
			if o.Reg2 >= 0 {
				if v, err = read(base + 8); err != nil {
					return err
				}
				set(o.Reg2, v)
			}
			if o.Writeback {
				sp += uint64(o.Offset)
			}
		default:
			return fmt.Errorf("winunwind: arm64 unwind code %x not supported", o.Code)
		}
	}
	regs.R[arch.ARM64SP] = sp
	regs.Mask |= 1 << arch.ARM64SP
	regs.R[arch.ARM64PC] = regs.R[arch.ARM64LR]
	return nil
}
