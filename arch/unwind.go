package arch

import (
	"debug/elf"
	"encoding/binary"
	"fmt"
	"math/bits"
	"sort"
)

// Module is one loaded image as an unwinder sees it: the address range it
// occupies in the target, its load bias (runtime address minus link-time
// address) and its unwind table. Table may be nil: the unwinder then uses
// frame pointers inside the module.
type Module struct {
	Start, End uint64 // [Start, End) in the target's address space
	Bias       uint64
	Table      *Table
}

// Modules is the set of modules an unwinder consults, sorted by address.
// It is not safe to change a Modules while an Unwinder reads it; a caller
// that updates modules while unwinding on other goroutines gives each
// goroutine its own Modules, or serializes.
type Modules struct {
	mods []Module
	gen  uint64
}

// Add inserts m, replacing any module that overlaps it (a new mapping at
// the same addresses means the old one is gone).
func (ms *Modules) Add(m Module) {
	out := ms.mods[:0]
	for _, o := range ms.mods {
		if o.End <= m.Start || o.Start >= m.End {
			out = append(out, o)
		}
	}
	i := sort.Search(len(out), func(i int) bool { return out[i].Start >= m.Start })
	out = append(out, Module{})
	copy(out[i+1:], out[i:])
	out[i] = m
	ms.mods = out
	ms.gen++
}

// Remove drops the module starting at start and reports whether there was
// one.
func (ms *Modules) Remove(start uint64) bool {
	for i, m := range ms.mods {
		if m.Start == start {
			ms.mods = append(ms.mods[:i], ms.mods[i+1:]...)
			ms.gen++
			return true
		}
	}
	return false
}

// Len is the number of modules.
func (ms *Modules) Len() int { return len(ms.mods) }

// Find returns the module containing addr, or nil.
func (ms *Modules) Find(addr uint64) *Module {
	s := ms.mods
	lo, hi := 0, len(s)
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if s[m].Start <= addr {
			lo = m + 1
		} else {
			hi = m
		}
	}
	if lo == 0 || addr >= s[lo-1].End {
		return nil
	}
	return &s[lo-1]
}

// Rule returns the unwind rule for the runtime address addr.
func (ms *Modules) Rule(addr uint64) Rule {
	m := ms.Find(addr)
	if m == nil || m.Table == nil {
		return Rule{}
	}
	return m.Table.Lookup(addr - m.Bias)
}

// LoadBias returns the load bias of an ELF file whose code is mapped at
// mapStart from file offset mapOffset (an executable line of
// /proc/PID/maps, a PROT_EXEC mmap record, a module load): the runtime
// address minus the link-time address. The segment is the executable one
// whose first page the mapping starts at (4, 16 or 64 KiB pages), else
// any segment whose first page it starts at, else the one holding the
// offset.
//
// Executable first: lld packs segments in the file without page
// alignment, so in a small file the read-only segment (p_offset 0,
// p_vaddr 0) and the code segment (say p_offset 0x6e0, p_vaddr 0x16e0)
// both begin in file page 0, while the loader maps that page once per
// segment, a page apart. Taking the read-only segment for the code
// mapping would put every pc a page off in the file's tables and
// symbols.
func LoadBias(f *elf.File, mapStart, mapOffset uint64) (uint64, error) {
	bias := func(p *elf.Prog) uint64 { return mapStart - (p.Vaddr - p.Off + mapOffset) }
	for _, ps := range []uint64{4 << 10, 16 << 10, 64 << 10} {
		var first *elf.Prog
		for _, p := range f.Progs {
			if p.Type != elf.PT_LOAD || p.Off&^(ps-1) != mapOffset {
				continue
			}
			if p.Flags&elf.PF_X != 0 {
				return bias(p), nil
			}
			if first == nil {
				first = p
			}
		}
		if first != nil {
			return bias(first), nil
		}
	}
	for _, p := range f.Progs {
		if p.Type == elf.PT_LOAD && p.Off <= mapOffset && mapOffset-p.Off < p.Filesz {
			return bias(p), nil
		}
	}
	return 0, fmt.Errorf("arch: no PT_LOAD segment holds file offset %#x", mapOffset)
}

// Stop says why an unwind ended.
type Stop uint8

const (
	StopNone       Stop = iota
	StopOutermost       // the unwind info marks the outermost frame, or the frame pointer chain ends with 0
	StopMaxFrames       // the pcs buffer reached MaxFrames
	StopBadMemory       // a read left the readable memory (often: the end of a stack copy)
	StopNoProgress      // the stack pointer did not move up: a loop or corrupt stack
	StopNoRule          // no usable rule and no usable frame pointer
	StopNoRegs          // a register the rule needs is unknown
	StopChain           // the rest came from Unwinder.Chain, where memory ran out
)

var stopNames = [...]string{"none", "outermost frame", "max frames", "bad memory", "no progress", "no rule", "register unknown", "frame-pointer chain"}

func (s Stop) String() string {
	if int(s) < len(stopNames) {
		return stopNames[s]
	}
	return fmt.Sprintf("stop(%d)", uint8(s))
}

const cacheSize = 512 // entries; a power of two

type cacheEntry struct {
	addr uint64 // lookup address + 1, so the zero entry is empty
	rule Rule
}

// Unwinder walks stacks with DWARF CFI where a module's table covers the
// PC and with frame pointers where none does. It keeps a small cache of
// hot rules, so it is not safe for concurrent use: use one per goroutine.
// Once warm, Unwind does not allocate.
type Unwinder struct {
	Modules *Modules
	// MaxFrames caps the frames of one stack; 0 means 1024.
	MaxFrames int
	// Stop is why the last Unwind ended.
	Stop Stop
	// Frames counts, for the last Unwind, frames stepped with CFI and with
	// frame pointers.
	CFIFrames, FPFrames int
	// Code, when not nil, says whether addr lies in executable memory of
	// the target (any mapping: files, the vDSO, JIT code). A caller's pc
	// for which it returns false ends the walk there, as its outermost
	// frame, and is not reported: the first function of a process or
	// thread has no caller, yet its rule reads whatever lies above it
	// (Go's rt0_go, entered by a jump, reads argc; a thread's
	// runtime.clone the word above its new stack).
	Code func(addr uint64) bool
	// Chain, when not nil, is a frame-pointer walk of the same stack,
	// made where the stack was: the kernel's user callchain of the
	// sample whose registers and stack copy Unwind gets (Chain[0] is the
	// pc, then the return address of each frame record, from the frame
	// pointer register up). Where the walk needs memory the stack copy
	// does not hold, at a frame that keeps a frame pointer (the far side
	// of a Go stack switch, a stack deeper than the copy), it goes on
	// with the part of Chain above that frame's record, found by
	// following the frame pointers through the copy from the registers'
	// own, and ends with StopChain.
	Chain []uint64

	gen uint64
	// During Unwind: the Memory, and its bytes when it is a *StackCopy.
	mem     Memory
	data    []byte
	base    uint64
	limit   uint64 // offsets below limit have 8 bytes in data
	regs    Regs
	scratch [8]byte
	cache   [cacheSize]cacheEntry
}

// NewUnwinder returns an Unwinder over mods.
func NewUnwinder(mods *Modules) *Unwinder { return &Unwinder{Modules: mods} }

// fill looks addr up in the modules and stores it in cache entry e.
func (u *Unwinder) fill(e *cacheEntry, addr uint64) *Rule {
	e.addr, e.rule = addr+1, Rule{}
	if u.Modules != nil {
		e.rule = u.Modules.Rule(addr)
	}
	return &e.rule
}

// read64 reads a little-endian pointer: from the stack copy directly when
// the Memory is a *StackCopy, else through the interface.
func (u *Unwinder) read64(addr uint64) (uint64, bool) {
	if v, ok := u.fast(addr); ok {
		return v, true
	}
	return u.readSlow(addr)
}

// fast reads from the stack copy; small enough to inline in the walk.
func (u *Unwinder) fast(addr uint64) (uint64, bool) {
	if off := addr - u.base; off < u.limit {
		return binary.LittleEndian.Uint64(u.data[off : off+8]), true
	}
	return 0, false
}

func (u *Unwinder) readSlow(addr uint64) (uint64, bool) {
	if u.mem == nil || u.data != nil || u.mem.ReadMemory(addr, u.scratch[:]) != nil {
		return 0, false
	}
	return binary.LittleEndian.Uint64(u.scratch[:]), true
}

// Unwind appends to pcs the program counters of the stack whose innermost
// frame is regs, leaf first: regs' PC, then each caller's return address
// (as gdb and perf report them; symbolize a return address at pc-1). It
// reads saved registers through mem and records in u.Stop why it ended.
//
// Every register regs knows serves the innermost frame; in callers the
// unwinder knows sp, pc, the frame pointer, arm64's lr and the callee-saved
// registers (Arch.CalleeSaved) the rules recover.
func (u *Unwinder) Unwind(regs *Regs, mem Memory, pcs []uint64) []uint64 {
	a := regs.Arch
	u.Stop, u.CFIFrames, u.FPFrames = StopNone, 0, 0
	maxFrames := u.MaxFrames
	if maxFrames <= 0 {
		maxFrames = 1024
	}
	pcReg, spReg, fpReg := a.PC(), a.SP(), a.FP()
	if (a != AMD64 && a != ARM64) || !regs.Has(pcReg) || !regs.Has(spReg) {
		u.Stop = StopNoRegs
		return pcs
	}
	if ms := u.Modules; ms != nil && u.gen != ms.gen {
		u.cache = [cacheSize]cacheEntry{}
		u.gen = ms.gen
	}
	u.mem, u.data, u.base, u.limit = mem, nil, 0, 0
	if sc, ok := mem.(*StackCopy); ok {
		u.data, u.base = sc.Data, sc.Addr
		if u.data == nil {
			u.data = []byte{}
		}
		if len(u.data) >= 8 {
			u.limit = uint64(len(u.data)) - 7
		}
	}
	defer func() { u.mem, u.data = nil, nil }()
	r := &u.regs
	*r = *regs
	saved := a.CalleeSaved()
	var keep uint64 // registers that survive into callers
	for _, n := range saved {
		keep |= 1 << uint(n)
	}
	// pc, sp and the frame pointer live in locals; r holds the rest.
	pc, sp, fp := r.R[pcReg], r.R[spReg], r.R[fpReg]
	haveFP := r.Has(fpReg)
	fp0 := uint64(0) // the chain's first frame record
	if haveFP {
		fp0 = fp
	}
	var inMem uint64     // callee-saved registers whose r.R holds the save slot's address
	afterSignal := false // the previous frame was a signal trampoline
	for n := 0; ; n++ {
		if n >= maxFrames {
			u.Stop = StopMaxFrames
			return pcs
		}
		if pc == 0 {
			u.Stop = StopOutermost
			return pcs
		}
		pcs = append(pcs, pc)
		look := pc
		if n > 0 && !afterSignal {
			look-- // a return address may be past the end of its call's function
		}
		e := &u.cache[((look*0x9e3779b97f4a7c15)>>(64-9))&(cacheSize-1)]
		rule := &e.rule
		if e.addr != look+1 {
			rule = u.fill(e, look)
		}

		if n > 0 && rule.SwitchStop {
			u.Stop = StopOutermost
			return pcs
		}
		var cfa, ra, newFP uint64
		newHaveFP := haveFP
		ok := true
		// A Go stack switch runs on another stack than its frame's: step
		// it by its frame pointer (past its prologue, in the innermost
		// frame), wherever that points.
		switched := rule.Switch && haveFP && fp != 0 && (n > 0 || linked(a, *rule))
		if switched && rule.SwitchBack {
			_, ok1 := u.read64(fp)
			_, ok2 := u.read64(fp + 8)
			switched = ok1 && ok2
		}
		cfaKind := rule.CFA
		if switched {
			cfaKind = CFANone
		}
		switch cfaKind {
		case CFAReg, CFADeref, CFAPLT:
			switch reg := int(rule.CFAReg); {
			case reg == spReg:
				cfa = sp
			case reg == fpReg && haveFP:
				cfa = fp
			case reg < NumRegs && reg != pcReg && r.Mask&(1<<uint(reg)) != 0:
				cfa = r.R[reg]
				if inMem&(1<<uint(reg)) != 0 {
					cfa, ok = u.read64(cfa)
				}
			default:
				ok = false
			}
			cfa += uint64(int64(rule.CFAOff))
			if rule.CFA == CFADeref {
				if cfa, ok = u.read64(cfa); !ok {
					u.Stop = StopBadMemory
					return pcs
				}
			}
			if rule.CFA == CFAPLT && (pc&uint64(rule.PLTMask)) >= uint64(rule.PLTGE) {
				cfa += 1 << (rule.PLTShift & 63)
			}
		default:
			ok = false
		}
		if ok {
			switch rule.RA {
			case RegOffset:
				at := cfa + uint64(int64(rule.RAOff))
				if ra, ok = u.fast(at); !ok {
					if ra, ok = u.readSlow(at); !ok {
						if haveFP && (keepsFP(a, *rule) || rule.Go) {
							return u.splice(pcs, fp0, fp, maxFrames)
						}
						u.Stop = StopBadMemory
						return pcs
					}
				}
			case RegValOffset:
				ra = cfa + uint64(int64(rule.RAOff))
			case RegAtFP, RegAtSP:
				at := sp + uint64(int64(rule.RAOff))
				if rule.RA == RegAtFP {
					at = fp + uint64(int64(rule.RAOff))
				}
				if ra, ok = u.read64(at); !ok || (rule.RA == RegAtFP && !haveFP) {
					u.Stop = StopBadMemory
					return pcs
				}
			case RegSame:
				ra, ok = r.R[ARM64LR], a == ARM64 && r.Mask&(1<<ARM64LR) != 0
			case RegUndefined:
				u.CFIFrames++
				u.Stop = StopOutermost
				return pcs
			default:
				ok = false
			}
		}
		if ok {
			switch rule.FP {
			case RegSame:
				newFP = fp
			case RegOffset:
				// In an epilogue the rule can still point at the save slot
				// after the pop, below sp and so outside a stack copy; the
				// register then already holds the caller's value.
				at := cfa + uint64(int64(rule.FPOff))
				var ok1 bool
				newFP, ok1 = u.fast(at)
				if !ok1 {
					if newFP, ok1 = u.readSlow(at); !ok1 {
						newFP = fp
					}
				}
				newHaveFP = newHaveFP || ok1
			case RegValOffset:
				newFP, newHaveFP = cfa+uint64(int64(rule.FPOff)), true
			case RegAtFP, RegAtSP:
				at := sp + uint64(int64(rule.FPOff))
				if rule.FP == RegAtFP {
					at = fp + uint64(int64(rule.FPOff))
				}
				if newFP, ok = u.read64(at); !ok || (rule.FP == RegAtFP && !haveFP) {
					u.Stop = StopBadMemory
					return pcs
				}
				newHaveFP = true
			default:
				newHaveFP = false
			}
			if rule.RASigned {
				ra &= 1<<48 - 1
			}
			// Callee-saved registers: restore those saved, forget those lost.
			for m := rule.SavedSet; m != 0; m &= m - 1 {
				i := bits.TrailingZeros16(m)
				if i >= len(saved) {
					break
				}
				reg := saved[i]
				switch o := rule.Saved[i]; o {
				case SavedLost:
					r.Mask &^= 1 << uint(reg)
					inMem &^= 1 << uint(reg)
				default:
					// Lazily: remember the slot, read it only if a CFA
					// rule needs the register.
					slot := cfa
					if rule.SavedAtSP {
						slot = sp
					}
					r.Set(reg, slot+uint64(int64(o)*8))
					inMem |= 1 << uint(reg)
				}
			}
			u.CFIFrames++
		} else {
			// No usable row: follow the frame pointer. The saved frame
			// pointer is at fp and the return address just above it, on
			// both arches. Callee-saved registers are kept: a function with
			// frame pointers saves them where no rule here says.
			if !haveFP || fp == 0 {
				u.Stop = StopOutermost
				if !haveFP {
					u.Stop = StopNoRule
				}
				return pcs
			}
			if fp < sp && !switched || fp&7 != 0 {
				u.Stop = StopNoRule
				return pcs
			}
			var ok1, ok2 bool
			newFP, ok1 = u.read64(fp)
			ra, ok2 = u.read64(fp + 8)
			if !ok1 || !ok2 {
				return u.splice(pcs, fp0, fp, maxFrames)
			}
			cfa, newHaveFP = fp+16, true
			u.FPFrames++
		}
		// The stack grows down: each caller's frame is above its callee's.
		// Only an arm64 leaf that has not pushed anything may keep sp.
		if !switched && !rule.Signal && (cfa < sp || cfa == sp && ((n > 0 && !afterSignal) || a != ARM64)) {
			u.Stop = StopNoProgress
			return pcs
		}
		// A caller in no code: this frame was the first (see Code).
		if ra != 0 && u.Code != nil && !u.Code(ra) {
			u.Stop = StopOutermost
			return pcs
		}
		if n == 0 {
			r.Mask &= keep
		}
		afterSignal = ok && rule.Signal
		pc, sp, fp, haveFP = ra, cfa, newFP, newHaveFP
		if a == ARM64 {
			r.Set(ARM64LR, ra)
		}
	}
}

// linked reports whether rule, the row of a function's own pc, says its
// prologue has saved the frame pointer (and so, in Go code, linked its
// frame record).
func linked(a Arch, rule Rule) bool {
	return rule.FP == RegOffset || rule.CFA == CFAReg && int(rule.CFAReg) == a.FP()
}

// keepsFP reports whether a frame whose row is rule has linked a frame
// record at its frame pointer: its return address is 8 bytes above the
// record, as a frame-pointer walk reads it. amd64: rbp saved at CFA-16
// with the CFA from rsp (Go's rows) or from rbp itself (CFA = rbp+16, a C
// function's with frame pointers); arm64: x29 saved 8 bytes below the
// return address.
func keepsFP(a Arch, rule Rule) bool {
	if rule.FP != RegOffset || rule.CFA != CFAReg {
		return false
	}
	switch a {
	case AMD64:
		return rule.FPOff == -16 && rule.RA == RegOffset && rule.RAOff == -8 &&
			(int(rule.CFAReg) == AMD64RSP || int(rule.CFAReg) == AMD64RBP && rule.CFAOff == 16)
	case ARM64:
		return rule.RA == RegOffset && rule.FPOff == rule.RAOff-8
	}
	return false
}

// splice ends a walk that needs memory outside the stack copy at a frame
// whose frame record is at fp: it follows the frame pointers from fp0
// (the registers' own) through the copy, checking each record's return
// address against Chain, to the record at fp, and appends the part of
// Chain above it. Without Chain, or when fp is not on that path, the
// walk ends as it would have (StopBadMemory).
func (u *Unwinder) splice(pcs []uint64, fp0, fp uint64, maxFrames int) []uint64 {
	u.Stop = StopBadMemory
	if len(u.Chain) < 2 || fp == 0 {
		return pcs
	}
	f := fp0
	for i := 0; i+1 < len(u.Chain) && f != 0; i++ {
		if f == fp {
			for _, pc := range u.Chain[i+1:] {
				if len(pcs) >= maxFrames {
					u.Stop = StopMaxFrames
					return pcs
				}
				if pc == 0 || u.Code != nil && !u.Code(pc) {
					break
				}
				pcs = append(pcs, pc)
			}
			u.Stop = StopChain
			return pcs
		}
		next, ok1 := u.read64(f)
		ra, ok2 := u.read64(f + 8)
		if !ok1 || !ok2 || ra != u.Chain[i+1] {
			return pcs
		}
		f = next
	}
	return pcs
}
