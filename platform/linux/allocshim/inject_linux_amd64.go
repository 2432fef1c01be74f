package allocshim

// The x86-64 part of the injection: the registers of a call.

// archInject says Inject is implemented for this architecture.
const archInject = true

// userRegs is the kernel's struct user_regs_struct (NT_PRSTATUS).
type userRegs [27]uint64

// Indices of userRegs.
const (
	regR9      = 8
	regR8      = 9
	regRAX     = 10
	regRCX     = 11
	regRDX     = 12
	regRSI     = 13
	regRDI     = 14
	regOrigRAX = 15
	regRIP     = 16
	regEflags  = 18
	regRSP     = 19
)

func (r *userRegs) pc() uint64 { return r[regRIP] }
func (r *userRegs) sp() uint64 { return r[regRSP] }

// result is a call's return value.
func (r *userRegs) result() uint64 { return r[regRAX] }

// syscall returns the system call the thread was stopped in, if any.
func (r *userRegs) syscall() (int, bool) {
	nr := int64(r[regOrigRAX])
	return int(nr), nr >= 0
}

// setCall sets the registers for a call of fn with args (at most six)
// whose return address is at sp: the System V calling convention, no
// vector arguments (al 0), the direction flag clear, and no system call
// to restart (orig_rax -1), so that the kernel does not rewind the
// instruction pointer of a thread stopped in one.
func (r *userRegs) setCall(fn, sp uint64, args []uint64) {
	for i, reg := range []int{regRDI, regRSI, regRDX, regRCX, regR8, regR9} {
		if i < len(args) {
			r[reg] = args[i]
		}
	}
	r[regRIP] = fn
	r[regRSP] = sp
	r[regRAX] = 0
	r[regOrigRAX] = ^uint64(0)
	r[regEflags] &^= 0x400 // DF
}

// allocSyscalls are the system calls an allocator makes: mmap, mprotect,
// munmap, brk, mremap, madvise.
var allocSyscalls = []int{9, 10, 11, 12, 25, 28}
