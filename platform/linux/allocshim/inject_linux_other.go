//go:build linux && !amd64

package allocshim

// The injection's architecture part (the registers of a remote call)
// is written for x86-64 only. On arm64 the sampler is built and preloaded
// into launched commands; a running process's allocations are recorded
// by the eBPF back end's uprobes, and the perf back end's Open with Alloc
// fails with Inject's error.

const archInject = false

type userRegs [1]uint64

func (r *userRegs) pc() uint64                           { return 0 }
func (r *userRegs) sp() uint64                           { return 0 }
func (r *userRegs) result() uint64                       { return 0 }
func (r *userRegs) syscall() (int, bool)                 { return 0, false }
func (r *userRegs) setCall(fn, sp uint64, args []uint64) {}

var allocSyscalls []int
