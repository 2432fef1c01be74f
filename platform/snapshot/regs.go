package snapshot

import (
	"fmt"

	"github.com/rawstack/rawstack/arch"
)

// Sizes in words of the kernel's general-purpose register set (struct
// user_regs_struct; elf_gregset_t in an NT_PRSTATUS note).
const (
	gregsAMD64 = 27
	gregsARM64 = 34
)

// amd64GregToDWARF maps the index of a register in amd64's user_regs_struct
// (r15 r14 r13 r12 rbp rbx r11 r10 r9 r8 rax rcx rdx rsi rdi orig_rax rip
// cs eflags rsp ...) to its DWARF number, -1 for those an unwinder does not
// use.
var amd64GregToDWARF = [gregsAMD64]int8{
	15, 14, 13, 12, arch.AMD64RBP, arch.AMD64RBX, 11, 10, 9, 8,
	arch.AMD64RAX, arch.AMD64RCX, arch.AMD64RDX, arch.AMD64RSI, arch.AMD64RDI,
	-1, arch.AMD64RIP, -1, -1, arch.AMD64RSP,
	-1, -1, -1, -1, -1, -1, -1,
}

// regsFromGregs converts a general-purpose register set of architecture a
// (in user_regs_struct order) to arch.Regs.
func regsFromGregs(a arch.Arch, g []uint64) (arch.Regs, error) {
	r := arch.Regs{Arch: a}
	switch a {
	case arch.AMD64:
		if len(g) < gregsAMD64 {
			return r, fmt.Errorf("amd64 register set has %d words, want %d", len(g), gregsAMD64)
		}
		for i, d := range amd64GregToDWARF {
			if d >= 0 {
				r.Set(int(d), g[i])
			}
		}
	case arch.ARM64:
		// x0-x30, sp, pc (then pstate): DWARF numbers 0-32.
		if len(g) < gregsARM64 {
			return r, fmt.Errorf("arm64 register set has %d words, want %d", len(g), gregsARM64)
		}
		for i := 0; i <= arch.ARM64PC; i++ {
			r.Set(i, g[i])
		}
	default:
		return r, fmt.Errorf("unsupported architecture %v", a)
	}
	return r, nil
}
