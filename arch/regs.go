package arch

import (
	"errors"
	"fmt"
	"math/bits"
)

// Arch identifies an instruction set. The values equal format.Arch's, so a
// conversion between the two is a cast.
type Arch uint8

const (
	ArchUnknown Arch = 0
	AMD64       Arch = 1
	ARM64       Arch = 2
)

func (a Arch) String() string {
	switch a {
	case AMD64:
		return "amd64"
	case ARM64:
		return "arm64"
	}
	return fmt.Sprintf("arch(%d)", uint8(a))
}

// Registers are numbered as DWARF numbers them in each psABI, the numbering
// .eh_frame and .debug_frame use and the one the event format's RawStack
// RegMask uses.
//
// amd64 (System V x86-64 psABI §3.6.2, "DWARF Register Number Mapping"):
//
//	0 rax  1 rdx  2 rcx  3 rbx  4 rsi  5 rdi  6 rbp  7 rsp
//	8-15 r8-r15   16 return address (rip)
//
// arm64 (AADWARF64 §4.1):
//
//	0-30 x0-x30 (29 = fp, 30 = lr)   31 sp   32 pc
const (
	AMD64RAX = 0
	AMD64RDX = 1
	AMD64RCX = 2
	AMD64RBX = 3
	AMD64RSI = 4
	AMD64RDI = 5
	AMD64RBP = 6
	AMD64RSP = 7
	AMD64R8  = 8
	AMD64R14 = 14 // Go's g register
	AMD64R15 = 15
	AMD64RIP = 16

	ARM64X0 = 0
	ARM64FP = 29 // x29
	ARM64LR = 30 // x30
	ARM64SP = 31
	ARM64PC = 32
)

// NumRegs is the size of Regs.R: enough for every register an unwinder of
// either arch reads or restores.
const NumRegs = 33

// Regs is one thread's integer registers, indexed by DWARF register number
// (see the constants above). Mask bit i says R[i] is known; an unwinder
// only uses known registers.
type Regs struct {
	Arch Arch
	Mask uint64
	R    [NumRegs]uint64
}

// PC, SP and FP return the program counter, stack pointer and frame
// pointer register numbers of a.
func (a Arch) PC() int {
	if a == ARM64 {
		return ARM64PC
	}
	return AMD64RIP
}

// SP is the stack pointer's register number.
func (a Arch) SP() int {
	if a == ARM64 {
		return ARM64SP
	}
	return AMD64RSP
}

// FP is the frame pointer's register number.
func (a Arch) FP() int {
	if a == ARM64 {
		return ARM64FP
	}
	return AMD64RBP
}

// PtrSize is the size of a pointer in bytes: 8 for both supported arches.
func (a Arch) PtrSize() int { return 8 }

// Set stores v into register n and marks it known.
func (r *Regs) Set(n int, v uint64) {
	r.R[n] = v
	r.Mask |= 1 << uint(n)
}

// Has reports whether register n is known.
func (r *Regs) Has(n int) bool { return n >= 0 && n < NumRegs && r.Mask&(1<<uint(n)) != 0 }

// PC returns the program counter.
func (r *Regs) PC() uint64 { return r.R[r.Arch.PC()] }

// SP returns the stack pointer.
func (r *Regs) SP() uint64 { return r.R[r.Arch.SP()] }

// FP returns the frame pointer.
func (r *Regs) FP() uint64 { return r.R[r.Arch.FP()] }

// SetMasked fills r from a RegMask and its values in ascending register
// order, as in a format.RawStack event. Bits at or above NumRegs are
// skipped with their values. It reports an error if vals is shorter than
// the mask says.
func (r *Regs) SetMasked(a Arch, mask uint64, vals []uint64) error {
	*r = Regs{Arch: a}
	i := 0
	for n := 0; n < 64; n++ {
		if mask&(1<<uint(n)) == 0 {
			continue
		}
		if i >= len(vals) {
			return fmt.Errorf("arch: register mask %#x names %d or more registers, have %d values", mask, i+1, len(vals))
		}
		if n < NumRegs {
			r.Set(n, vals[i])
		}
		i++
	}
	return nil
}

// AppendMasked appends the known registers in ascending order to vals and
// returns the new slice with r.Mask: the RawStack encoding of r.
func (r *Regs) AppendMasked(vals []uint64) ([]uint64, uint64) {
	for n := 0; n < NumRegs; n++ {
		if r.Mask&(1<<uint(n)) != 0 {
			vals = append(vals, r.R[n])
		}
	}
	return vals, r.Mask
}

// Perf sample register numbering (Linux uapi asm/perf_regs.h). A perf
// sample with PERF_SAMPLE_REGS_USER carries the registers whose bits are set
// in perf_event_attr.sample_regs_user, in ascending bit order.
//
// x86-64 (arch/x86/include/uapi/asm/perf_regs.h):
//
//	0 AX  1 BX  2 CX  3 DX  4 SI  5 DI  6 BP  7 SP  8 IP  9 FLAGS
//	10 CS 11 SS 12 DS 13 ES 14 FS 15 GS  16-23 R8-R15
//
// DS, ES, FS and GS are rejected by the kernel on x86-64 (EINVAL), so the
// mask must not name them.
//
// arm64 (arch/arm64/include/uapi/asm/perf_regs.h):
//
//	0-28 X0-X28  29 X29 (fp)  30 LR  31 SP  32 PC
const (
	// PerfRegsAMD64 is the sample_regs_user mask a perf back end sets on
	// x86-64: every general-purpose register and IP, no flags or segments.
	PerfRegsAMD64 uint64 = 0x1ff | 0xff<<16
	// PerfRegsARM64 is the sample_regs_user mask on arm64: x0-x30, sp, pc.
	PerfRegsARM64 uint64 = 1<<33 - 1
)

// perfToDWARFAMD64 maps a PERF_REG_X86_* number to a DWARF number, or -1.
var perfToDWARFAMD64 = [24]int8{
	0: AMD64RAX, 1: AMD64RBX, 2: AMD64RCX, 3: AMD64RDX, 4: AMD64RSI, 5: AMD64RDI,
	6: AMD64RBP, 7: AMD64RSP, 8: AMD64RIP,
	9: -1, 10: -1, 11: -1, 12: -1, 13: -1, 14: -1, 15: -1,
	16: 8, 17: 9, 18: 10, 19: 11, 20: 12, 21: 13, 22: 14, 23: 15,
}

// PerfRegsMask returns the sample_regs_user mask for a, or 0 if a is not
// supported.
func PerfRegsMask(a Arch) uint64 {
	switch a {
	case AMD64:
		return PerfRegsAMD64
	case ARM64:
		return PerfRegsARM64
	}
	return 0
}

// PerfToDWARF returns the DWARF number of perf register p of arch a, or -1
// if the register has none (flags, segment registers) or p is unknown.
func PerfToDWARF(a Arch, p int) int {
	switch a {
	case AMD64:
		if p >= 0 && p < len(perfToDWARFAMD64) {
			return int(perfToDWARFAMD64[p])
		}
	case ARM64:
		// The arm64 perf numbering equals DWARF's for x0-x30, sp and pc.
		if p >= 0 && p <= ARM64PC {
			return p
		}
	}
	return -1
}

// SetPerf fills r from a perf sample's REGS_USER block: mask is the
// sample_regs_user the event was opened with, vals the registers in
// ascending perf bit order. It does not allocate.
func (r *Regs) SetPerf(a Arch, mask uint64, vals []uint64) error {
	*r = Regs{Arch: a}
	i := 0
	for m := mask; m != 0; m &= m - 1 { // the set bits, lowest first
		if i >= len(vals) {
			return errShortPerfRegs
		}
		if d := PerfToDWARF(a, bits.TrailingZeros64(m)); d >= 0 {
			r.Set(d, vals[i])
		}
		i++
	}
	return nil
}

var errShortPerfRegs = errors.New("arch: perf register block shorter than its mask")

// Linux ptrace register layouts (PTRACE_GETREGS / PTRACE_GETREGSET
// NT_PRSTATUS), as a slice of 64-bit words, and in core files' NT_PRSTATUS
// notes.
//
// x86-64 struct user_regs_struct (sys/user.h), 27 words:
//
//	r15 r14 r13 r12 rbp rbx r11 r10 r9 r8 rax rcx rdx rsi rdi orig_rax
//	rip cs eflags rsp ss fs_base gs_base ds es fs gs
//
// arm64 struct user_pt_regs, 34 words: x0-x30 sp pc pstate.
var userRegsAMD64 = [...]int8{
	15, 14, 13, 12, AMD64RBP, AMD64RBX, 11, 10, 9, 8, AMD64RAX, AMD64RCX, AMD64RDX, AMD64RSI, AMD64RDI, -1,
	AMD64RIP, -1, -1, AMD64RSP,
}

// SetUserRegs fills r from a Linux user_regs_struct (amd64) or
// user_pt_regs (arm64) given as 64-bit words.
func (r *Regs) SetUserRegs(a Arch, words []uint64) error {
	*r = Regs{Arch: a}
	switch a {
	case AMD64:
		if len(words) < len(userRegsAMD64) {
			return fmt.Errorf("arch: amd64 user_regs_struct needs %d words, have %d", len(userRegsAMD64), len(words))
		}
		for i, d := range userRegsAMD64 {
			if d >= 0 {
				r.Set(int(d), words[i])
			}
		}
	case ARM64:
		if len(words) < 33 {
			return fmt.Errorf("arch: arm64 user_pt_regs needs 33 words, have %d", len(words))
		}
		for i := 0; i <= ARM64PC; i++ {
			r.Set(i, words[i])
		}
	default:
		return fmt.Errorf("arch: no user register layout for %v", a)
	}
	return nil
}
