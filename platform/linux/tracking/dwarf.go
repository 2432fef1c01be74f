package tracking

import (
	"encoding/binary"
	"fmt"

	"github.com/rawstack/rawstack/arch"
)

// userStack is the part of a PERF_RECORD_SAMPLE that DWARF-mode sampling
// adds after the callchain (sample_type REGS_USER|STACK_USER):
//
//	u64 abi;                        PERF_SAMPLE_REGS_ABI_*; 0: no registers follow
//	u64 regs[weight(regs_mask)];    ascending perf register number
//	u64 size;                       the sample_stack_user asked for, or 0
//	char data[size];
//	u64 dyn_size;                   how many bytes of data are valid (absent if size is 0)
type userStack struct {
	NUserRegs int  // weight of sample_regs_user; 0: the session samples no user stacks
	regsOnly  bool // REGS_USER without STACK_USER (goroutines in frame-pointer mode)
	// UserRegsMask is sample_regs_user: which registers UserRegs holds,
	// in ascending perf number (0: none)
	UserRegsMask uint64

	UserABI   uint64
	UserRegs  []uint64 // aliases the decoder's buffer
	UserStack []byte   // the dyn_size valid bytes, aliasing the record
}

// decodeUserStack decodes the REGS_USER and STACK_USER fields at b.
func decodeUserStack(b []byte, r *record) error {
	le := binary.LittleEndian
	r.UserRegs, r.UserStack = r.UserRegs[:0], nil
	if len(b) < 8 {
		return fmt.Errorf("%w: sample: no user register ABI", errRecord)
	}
	r.UserABI = le.Uint64(b)
	b = b[8:]
	if r.UserABI != 0 {
		if len(b) < 8*r.NUserRegs {
			return fmt.Errorf("%w: sample: %d user registers in %d bytes", errRecord, r.NUserRegs, len(b))
		}
		for i := 0; i < r.NUserRegs; i++ {
			r.UserRegs = append(r.UserRegs, le.Uint64(b[8*i:]))
		}
		b = b[8*r.NUserRegs:]
	}
	if r.regsOnly {
		return nil
	}
	if len(b) < 8 {
		return fmt.Errorf("%w: sample: no user stack size", errRecord)
	}
	size := le.Uint64(b)
	b = b[8:]
	if size == 0 {
		return nil
	}
	if size > uint64(len(b)) || len(b)-int(size) < 8 {
		return fmt.Errorf("%w: sample: user stack of %d bytes in %d", errRecord, size, len(b))
	}
	dyn := le.Uint64(b[size:])
	if dyn > size {
		dyn = size
	}
	r.UserStack = b[:dyn]
	return nil
}

// keepsFramePointers is --unwind auto's test of whether a module keeps
// frame pointers, from its unwind table: at least a tenth of its rows
// compute the CFA from the frame pointer. A function built with frame
// pointers on x86-64 has four rows (entry, after push %rbp, after
// mov %rsp,%rbp — CFA = rbp+16 until the epilogue —, after leave), so a
// module built with them has about a quarter of such rows (24% in the
// arch tests' fixture); a module built without has them only in the few
// functions that realign the stack or call alloca (3% in the fixture,
// 1.5% in Debian's libc). A lazy table answers from 256 of its FDEs
// (arch.Table.CFAShare; TestCFAShareLazyEstimate holds the estimate to
// the full count). A module without unwind info has nothing better than
// frame pointers.
func keepsFramePointers(a arch.Arch, t *arch.Table) bool {
	if t == nil {
		return true
	}
	fp, n := t.CFAShare(a.FP(), 256)
	return n == 0 || 10*fp >= n
}
