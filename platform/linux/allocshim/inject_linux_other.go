//go:build linux && !amd64

package allocshim

// The injection's architecture part is written for x86-64 only: the
// sampler itself is an x86-64 object.

const archInject = false

// Built says the sampler is built for this architecture: not here (the
// eBPF back end puts uprobes on a launched command's allocator instead;
// the perf back end refuses Alloc).
const Built = false

type userRegs [1]uint64

func (r *userRegs) pc() uint64                           { return 0 }
func (r *userRegs) sp() uint64                           { return 0 }
func (r *userRegs) result() uint64                       { return 0 }
func (r *userRegs) syscall() (int, bool)                 { return 0, false }
func (r *userRegs) setCall(fn, sp uint64, args []uint64) {}

var allocSyscalls []int
