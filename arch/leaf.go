package arch

import "encoding/binary"

// LeafCaller recovers the caller of the innermost frame from its unwind
// rule, to join a frame-pointer chain. A sample taken in a function
// before it links its frame (shrink-wrapped code whose hot path never
// pushes one, a leaf that never does, a prologue, an epilogue) has a
// frame-pointer chain that starts at its caller's caller: the caller is
// missing. rule is the row of regs' PC, mem holds at least the few words
// above the stack pointer (a perf sample's stack window, a snapshot's
// prefetched page).
//
// It returns the return address ra and unlinked: true when the frame
// pointer still holds the caller's value, so a chain from it misses ra.
// ok is false when the rule or the memory cannot say (then leave the chain
// as it is). A frame whose CFA is computed from the frame pointer is
// linked: ok and not unlinked.
func LeafCaller(rule Rule, regs *Regs, mem Memory) (ra uint64, unlinked, ok bool) {
	a := regs.Arch
	spReg, fpReg := a.SP(), a.FP()
	if !regs.Has(spReg) || !regs.Has(fpReg) {
		return 0, false, false
	}
	sp, fp := regs.R[spReg], regs.R[fpReg]
	var cfa uint64
	switch rule.CFA {
	case CFAReg, CFAPLT:
		switch int(rule.CFAReg) {
		case fpReg:
			return 0, false, true // the frame is linked
		case spReg:
		default:
			return 0, false, false
		}
		cfa = sp + uint64(int64(rule.CFAOff))
		if rule.CFA == CFAPLT && (regs.PC()&uint64(rule.PLTMask)) >= uint64(rule.PLTGE) {
			cfa += 1 << (rule.PLTShift & 63)
		}
	default:
		return 0, false, false
	}
	read := func(at uint64) (uint64, bool) {
		if at < sp || mem == nil {
			return 0, false
		}
		// A perf sample's stack copy is read in place: through the
		// interface, the 8-byte buffer would escape, an allocation per
		// sample on a recorder's hot path.
		if sc, ok := mem.(*StackCopy); ok {
			if off := at - sc.Addr; at >= sc.Addr && off < uint64(len(sc.Data)) && uint64(len(sc.Data))-off >= 8 {
				return binary.LittleEndian.Uint64(sc.Data[off:]), true
			}
			return 0, false
		}
		var b [8]byte
		if mem.ReadMemory(at, b[:]) != nil {
			return 0, false
		}
		return binary.LittleEndian.Uint64(b[:]), true
	}
	switch rule.RA {
	case RegOffset:
		if ra, ok = read(cfa + uint64(int64(rule.RAOff))); !ok {
			return 0, false, false
		}
	case RegSame: // arm64: the return address is still in the link register
		if a != ARM64 || !regs.Has(ARM64LR) {
			return 0, false, false
		}
		ra = regs.R[ARM64LR]
	default:
		return 0, false, false
	}
	if rule.RASigned {
		ra &= 1<<48 - 1
	}
	switch rule.FP {
	case RegSame:
		unlinked = true
	case RegOffset:
		// Saved but not yet (or no longer) linked: the slot holds the
		// value the register still has. A slot below sp was popped in an
		// epilogue, and the register is the caller's again.
		at := cfa + uint64(int64(rule.FPOff))
		saved, in := read(at)
		unlinked = !in || saved == fp
	default:
		return 0, false, false
	}
	return ra, unlinked, ra != 0
}
