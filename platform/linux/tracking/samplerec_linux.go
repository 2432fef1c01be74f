package tracking

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math/bits"

	"github.com/rawstack/rawstack/platform/linux/cpython"
)

// Sample records in the layout the eBPF back end's programs write
// (platform/linux/ebpf/bpf/rawstack.bpf.c, struct rs_hdr and what
// follows it), which the allocation sampler (package
// platform/linux/allocshim) writes into its shared ring too, for either
// back end: a 48-byte header (kind, pid, tid, cpu, u32 each; time,
// weight, u64 each; kernel frames, user frames, flags, Python frames,
// u16 each; stack bytes, u32, and 4 bytes of padding), then the user
// registers in perf's order (SampleNRegs: x86-64's 17, ax, bx, cx, dx,
// si, di, bp, sp, ip, r8-r15, without flags and segments; arm64's 33,
// x0-x30, sp, pc), the kernel frames, the user frames, the stack copy and the Python frames.
// A header alone is a record of its own for some kinds (an
// allocation's block, a free).
const (
	SampleHdrSize   = 48
	SampleKernelOff = SampleHdrSize + 8*SampleNRegs
	// MaxSampleStack is the most stack bytes a record carries (the
	// programs' MAX_STACK, the sampler's MaxRingStack).
	MaxSampleStack = 16384
	// MaxSamplePy is the most Python frames a record carries (MAX_PY).
	MaxSamplePy = 64

	SampleFlagRegs       = 1  // RS_REGS: the registers and stack copy are there
	SampleFlagStackFault = 2  // the stack copy faulted
	SampleFlagPy         = 4  // RS_PY: the Python frames were read at the sample
	SampleFlagPyGIL      = 8  // RS_PY_GIL: the thread held the GIL
	SampleFlagPyCut      = 16 // RS_PY_CUT: more Python frames than MaxSamplePy
	SampleFlagGRegs      = 32 // RS_GREGS: sp and the g register alone, no stack copy

	// The records of sampled allocations: a sampled call's stack
	// (weight: the bytes asked for), its return (header only, weight:
	// the block, 0 for none), and the free of a sampled block (header
	// only, weight: the block).
	KindAlloc    = 4
	KindAllocRet = 5
	KindFree     = 6
)

// ErrSampleRecord is wrapped by the errors of DecodeSampleRecord.
var ErrSampleRecord = errors.New("malformed sample record")

// DecodeSampleRecord decodes a sample record (as DecodeRecord does a
// perf sample) into r and returns its kind. The registers and the stack
// copy are taken only when the session samples user registers
// (r.UserRegsMask): those of the mask, or sp and the g register alone
// (SampleFlagGRegs). Every count is checked against the record's size: the
// records of the shared ring are written by the target process.
func DecodeSampleRecord(b []byte, r *Record) (kind uint32, err error) {
	le := binary.LittleEndian
	if len(b) < SampleKernelOff {
		return 0, fmt.Errorf("%w: %d bytes", ErrSampleRecord, len(b))
	}
	kind = le.Uint32(b)
	r.Type = RecSample
	r.Pid, r.Tid, r.CPU = le.Uint32(b[4:]), le.Uint32(b[8:]), le.Uint32(b[12:])
	r.Time, r.Period = le.Uint64(b[16:]), le.Uint64(b[24:])
	nk, nu, flags, npy := int(le.Uint16(b[32:])), int(le.Uint16(b[34:])), le.Uint16(b[36:]), int(le.Uint16(b[38:]))
	stack := int(le.Uint32(b[40:]))
	if nk > 127 || nu > 127 || stack > MaxSampleStack || npy > MaxSamplePy || SampleKernelOff+8*(nk+nu)+stack+8*cpython.RawWords*npy != len(b) {
		return 0, fmt.Errorf("%w: %d kernel frames, %d user frames, %d stack bytes and %d Python frames in %d bytes", ErrSampleRecord, nk, nu, stack, npy, len(b))
	}
	r.PyRead, r.PyGIL, r.PyCut = flags&SampleFlagPy != 0, flags&SampleFlagPyGIL != 0, flags&SampleFlagPyCut != 0
	r.Py = r.Py[:0]
	for i, off := 0, SampleKernelOff+8*(nk+nu)+stack; i < cpython.RawWords*npy; i++ {
		r.Py = append(r.Py, le.Uint64(b[off+8*i:]))
	}
	pcs := r.PCs[:0]
	for i := 0; i < nk+nu; i++ {
		pcs = append(pcs, le.Uint64(b[SampleKernelOff+8*i:]))
	}
	r.PCs = pcs
	r.Kernel = nk > 0
	r.UserAt = nk
	r.UserABI, r.UserRegs, r.UserStack = 0, r.UserRegs[:0], nil
	if flags&(SampleFlagRegs|SampleFlagGRegs) != 0 && r.UserRegsMask != 0 {
		// The registers the session samples (r.UserRegsMask, perf
		// numbers), from the record's perf order (sampleReg).
		r.UserABI = 2 // PERF_SAMPLE_REGS_ABI_64
		for m := r.UserRegsMask; m != 0; m &= m - 1 {
			i, ok := sampleReg(bits.TrailingZeros64(m))
			if !ok {
				continue
			}
			r.UserRegs = append(r.UserRegs, le.Uint64(b[SampleHdrSize+8*i:]))
		}
		if flags&SampleFlagRegs != 0 {
			off := SampleKernelOff + 8*(nk+nu)
			r.UserStack = b[off : off+stack]
		}
	}
	return kind, nil
}
