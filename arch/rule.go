package arch

import "fmt"

// CFAKind says how a row computes the canonical frame address (the caller's
// stack pointer at the call site).
type CFAKind uint8

const (
	// CFANone: no unwind row covers the address; unwinders fall back to
	// frame pointers.
	CFANone CFAKind = iota
	// CFAReg: CFA = R[Rule.CFAReg] + Rule.CFAOff.
	CFAReg
	// CFADeref: CFA = *(R[Rule.CFAReg] + Rule.CFAOff), the rule GCC emits
	// for functions that realign the stack
	// (DW_OP_breg6 -8; DW_OP_deref on amd64).
	CFADeref
	// CFAPLT: the x86-64 PLT rule
	// CFA = rsp + CFAOff + (((rip & PLTMask) >= PLTGE) << PLTShift).
	CFAPLT
	// CFAUnsupported: the row exists but uses a DWARF expression this
	// package does not evaluate.
	CFAUnsupported
)

// RegKind says how a row recovers the caller's value of one register.
type RegKind uint8

const (
	// RegSame: the register was not changed (DW_CFA_same_value, or no rule).
	// For arm64's return address column (x30) it means the return address
	// is still in the link register.
	RegSame RegKind = iota
	// RegUndefined: the caller's value is lost. For the return address
	// this marks the outermost frame.
	RegUndefined
	// RegOffset: saved in memory at CFA + Off.
	RegOffset
	// RegValOffset: the value is CFA + Off.
	RegValOffset
	// RegAtFP: saved at FP + Off, the rule GCC emits for rbp in functions
	// that realign the stack (DW_CFA_expression: DW_OP_breg6 Off).
	RegAtFP
	// RegUnsupported: a rule this package does not evaluate.
	RegUnsupported
	// RegAtSP: saved at SP + Off (the frame's own stack pointer), as in
	// signal frames (DW_CFA_expression: DW_OP_breg7 Off on amd64).
	RegAtSP
)

// Rule is one row of an unwind table reduced to what a stack walk needs:
// the CFA, the return address and the frame pointer. It is comparable, so
// a table stores each distinct rule once.
type Rule struct {
	CFA      CFAKind
	CFAReg   uint8
	RA       RegKind
	FP       RegKind
	PLTMask  uint8
	PLTGE    uint8
	PLTShift uint8
	// RASigned: on arm64 the saved return address carries a pointer
	// authentication code (DW_CFA_AARCH64_negate_ra_state); the unwinder
	// strips it.
	RASigned bool
	// Signal: the frame is a signal trampoline (CIE augmentation 'S'):
	// its caller's PC is where the signal interrupted, not a return
	// address, so the unwinder looks that PC up as is.
	Signal bool
	// SavedAtSP: Saved offsets are relative to the frame's SP, not the CFA.
	SavedAtSP bool
	// Switch: the function may run on another stack than the one its
	// frame is on (a Go stack switch: runtime.systemstack, asmcgocall,
	// …), and keeps its frame pointer at its frame: the unwinder steps it
	// by the frame pointer, and the caller's stack pointer may lie
	// anywhere.
	Switch bool
	// SwitchBack, with Switch: the function also keeps a valid frame on
	// the stack it switched to (runtime.cgocallback, which runs Go code
	// called from C on the goroutine's stack under a frame shaped like
	// its own, whose return address is where the goroutine entered C):
	// where the frame pointer's record cannot be read (a stack copy of
	// that stack alone), the rule steps it there instead, as the
	// runtime's own traceback does.
	SwitchBack bool
	// SwitchStop: the function switches stacks and keeps no frame pointer
	// (Go's morestack, gogo): as a caller, its frame is on a stack whose
	// caller cannot be found, and the walk ends there, as the runtime's
	// traceback ends at such functions.
	SwitchStop bool
	// Go: the address is Go code (a Go binary's pclntab covers it). A Go
	// function that calls keeps a frame pointer, and one that does not
	// leaves its caller's in place: where its caller's frame is outside
	// the memory an unwinder has (the interrupted frame above a signal
	// frame, on another stack), the frame-pointer chain from its
	// register continues it (missing only that caller).
	Go bool
	// Saved says where the arch's other callee-saved registers
	// (CalleeSaved) are: 0 unchanged, SavedLost not recoverable, else
	// saved at CFA + 8*Saved[i] (a slot at CFA+0, seen only in longjmp-like
	// code, counts as lost).
	Saved [MaxSaved]int8
	// SavedSet has bit i set where Saved[i] is not 0.
	SavedSet uint16
	CFAOff   int32
	RAOff    int32
	FPOff    int32
}

// SavedLost marks a callee-saved register whose caller value the rule
// cannot recover (undefined, or saved by a rule Rule does not hold).
const SavedLost int8 = -128

// MaxSaved is the size of Rule.Saved: arm64's x19-x28.
const MaxSaved = 10

var (
	calleeSavedAMD64 = []int{AMD64RBX, 12, 13, 14, 15}
	calleeSavedARM64 = []int{19, 20, 21, 22, 23, 24, 25, 26, 27, 28}
)

// CalleeSaved lists the callee-saved registers of a other than the frame
// pointer and the return address, in the order of Rule.Saved.
func (a Arch) CalleeSaved() []int {
	if a == ARM64 {
		return calleeSavedARM64
	}
	return calleeSavedAMD64
}

func savedSlot(a Arch, n uint64) int {
	for i, r := range a.CalleeSaved() {
		if uint64(r) == n {
			return i
		}
	}
	return -1
}

func (k RegKind) format(off int32) string {
	switch k {
	case RegSame:
		return "s"
	case RegUndefined:
		return "u"
	case RegOffset:
		return fmt.Sprintf("c%+d", off)
	case RegValOffset:
		return fmt.Sprintf("v%+d", off)
	case RegAtFP:
		return fmt.Sprintf("[fp%+d]", off)
	case RegAtSP:
		return fmt.Sprintf("[sp%+d]", off)
	}
	return "exp"
}

// String renders r like readelf --debug-dump=frames-interp does:
// "cfa=r7+8 ra=c-8 fp=s".
func (r Rule) String() string {
	var cfa string
	switch r.CFA {
	case CFANone:
		return "none"
	case CFAReg:
		cfa = fmt.Sprintf("r%d%+d", r.CFAReg, r.CFAOff)
	case CFADeref:
		cfa = fmt.Sprintf("[r%d%+d]", r.CFAReg, r.CFAOff)
	case CFAPLT:
		cfa = fmt.Sprintf("plt(r%d%+d)", r.CFAReg, r.CFAOff)
	default:
		cfa = "exp"
	}
	return fmt.Sprintf("cfa=%s ra=%s fp=%s", cfa, r.RA.format(r.RAOff), r.FP.format(r.FPOff))
}
