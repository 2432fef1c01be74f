//go:build linux

package unix

import (
	"unsafe"

	"golang.org/x/sys/unix"
)

// ptrace and process_vm_readv wrappers for platform/snapshot. Every ptrace
// request must come from the OS thread that seized the tracee: callers lock
// their goroutine to its thread (runtime.LockOSThread) around a snapshot.

// PtraceSeize attaches to thread tid without stopping it (PTRACE_SEIZE, no
// options).
func PtraceSeize(tid int) error {
	return ptrace(unix.PTRACE_SEIZE, tid, 0, 0)
}

// PtraceInterrupt asks a seized thread to stop (PTRACE_INTERRUPT); wait for
// the stop with WaitTid.
func PtraceInterrupt(tid int) error {
	return ptrace(unix.PTRACE_INTERRUPT, tid, 0, 0)
}

// PtraceDetachSignal detaches from a stopped thread and lets it run,
// delivering sig (0 for none): a thread caught in a signal-delivery-stop
// gets its signal back this way.
func PtraceDetachSignal(tid, sig int) error {
	return ptrace(unix.PTRACE_DETACH, tid, 0, uintptr(sig))
}

// PtraceGetRegSet reads the general-purpose registers of a stopped thread
// (PTRACE_GETREGSET, NT_PRSTATUS) into buf, in the order of the kernel's
// user_regs_struct for the host architecture, and returns how many words
// the kernel filled.
func PtraceGetRegSet(tid int, buf []uint64) (int, error) {
	if len(buf) == 0 {
		return 0, unix.EINVAL
	}
	iov := unix.Iovec{Base: (*byte)(unsafe.Pointer(&buf[0]))}
	iov.SetLen(len(buf) * 8)
	err := ptrace(unix.PTRACE_GETREGSET, tid, uintptr(unix.NT_PRSTATUS), uintptr(unsafe.Pointer(&iov)))
	if err != nil {
		return 0, err
	}
	return int(iov.Len) / 8, nil
}

func ptrace(req, pid int, addr, data uintptr) error {
	_, _, e := unix.Syscall6(unix.SYS_PTRACE, uintptr(req), uintptr(pid), addr, data, 0, 0)
	if e != 0 {
		return e
	}
	return nil
}

// TidStop is what WaitTid saw.
type TidStop struct {
	Exited bool // the thread exited or was killed
	Sig    int  // the stop signal (SIGTRAP for a PTRACE_INTERRUPT stop)
	Event  int  // the ptrace event (PtraceEventStop for an interrupt or group stop), 0 for a signal-delivery-stop
}

// PtraceEventStop is PTRACE_EVENT_STOP: the stop PTRACE_INTERRUPT asks for.
const PtraceEventStop = unix.PTRACE_EVENT_STOP

// WaitTid waits for the traced thread tid to stop or exit (wait4 with
// __WALL, retried on EINTR).
func WaitTid(tid int) (TidStop, error) {
	var ws unix.WaitStatus
	for {
		_, err := unix.Wait4(tid, &ws, unix.WALL, nil)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return TidStop{}, err
		}
		break
	}
	if ws.Stopped() {
		return TidStop{Sig: int(ws.StopSignal()), Event: int(uint32(ws)>>16) & 0xff}, nil
	}
	return TidStop{Exited: true}, nil
}

// RemoteIovec is struct iovec in another process.
type RemoteIovec = unix.RemoteIovec

// ProcessVMRead reads the remote ranges of pid into local, in order, with
// one process_vm_readv call, and returns the bytes read. A read stops at
// the first unreadable range.
func ProcessVMRead(pid int, local []byte, remote []RemoteIovec) (int, error) {
	if len(local) == 0 {
		return 0, nil
	}
	iov := [1]unix.Iovec{{Base: &local[0]}}
	iov[0].SetLen(len(local))
	return processVMReadv(pid, iov[:], remote)
}

// processVMReadv is process_vm_readv(2) made without telling the Go
// scheduler (a raw system call). The readers of the runtimes' heaps make
// it a dozen times a sample; through syscall.Syscall the first one after
// the process was idle woke the runtime's sysmon thread, which then polled
// every 20 µs while the reader ran: a quarter of a whole-host agent's CPU
// time with node and a JVM on the host. The call does not block: it copies
// resident memory, or faults in a page of the target as a load of mapped
// memory would.
func processVMReadv(pid int, local []unix.Iovec, remote []RemoteIovec) (int, error) {
	if len(local) == 0 || len(remote) == 0 {
		return 0, nil
	}
	n, _, e := unix.RawSyscall6(unix.SYS_PROCESS_VM_READV, uintptr(pid),
		uintptr(unsafe.Pointer(&local[0])), uintptr(len(local)),
		uintptr(unsafe.Pointer(&remote[0])), uintptr(len(remote)), 0)
	if e != 0 {
		return int(n), e
	}
	return int(n), nil
}

// Errno values the snapshot code tests for.
const (
	EFAULT = unix.EFAULT
	EIO    = unix.EIO
)

// ReadSmall reads up to len(buf) bytes of the file at path with one
// open, one read and one close: a short /proc file such as
// /proc/PID/task/TID/comm, read for every thread of a snapshot, where
// os.ReadFile's extra fstat calls and reads double the system calls.
func ReadSmall(path string, buf []byte) (int, error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	for err == unix.EINTR {
		fd, err = unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	}
	if err != nil {
		return 0, err
	}
	defer unix.Close(fd)
	for {
		n, err := unix.Read(fd, buf)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return 0, err
		}
		return n, nil
	}
}

// MmapPopulated maps size bytes of private anonymous memory with every
// page faulted in by the kernel at once (MAP_POPULATE): one system call
// instead of a page fault per page on first touch, which costs
// microseconds each on some virtual machines. Unmap it with Munmap.
func MmapPopulated(size int) ([]byte, error) {
	return unix.Mmap(-1, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_POPULATE)
}

// PtraceCont resumes a stopped thread, delivering sig (0 for none).
func PtraceCont(tid, sig int) error {
	return ptrace(unix.PTRACE_CONT, tid, 0, uintptr(sig))
}

// PtraceRegSet reads (set false) or writes (set true) the register set
// note (NT_PRSTATUS, NT_X86_XSTATE, ...) of a stopped thread from or
// into buf, and returns how many bytes the kernel read or wrote.
func PtraceRegSet(tid, note int, buf []byte, set bool) (int, error) {
	if len(buf) == 0 {
		return 0, unix.EINVAL
	}
	iov := unix.Iovec{Base: &buf[0]}
	iov.SetLen(len(buf))
	req := unix.PTRACE_GETREGSET
	if set {
		req = unix.PTRACE_SETREGSET
	}
	if err := ptrace(req, tid, uintptr(note), uintptr(unsafe.Pointer(&iov))); err != nil {
		return 0, err
	}
	return int(iov.Len), nil
}

// Register sets of PtraceRegSet.
const (
	NTPrstatus  = unix.NT_PRSTATUS
	NTX86Xstate = 0x202 // NT_X86_XSTATE
)

// WaitTidNohang is WaitTid that returns at once (done false) when the
// thread has not stopped or exited yet.
func WaitTidNohang(tid int) (st TidStop, done bool, err error) {
	var ws unix.WaitStatus
	for {
		wpid, err := unix.Wait4(tid, &ws, unix.WALL|unix.WNOHANG, nil)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return TidStop{}, false, err
		}
		if wpid == 0 {
			return TidStop{}, false, nil
		}
		break
	}
	if ws.Stopped() {
		return TidStop{Sig: int(ws.StopSignal()), Event: int(uint32(ws)>>16) & 0xff}, true, nil
	}
	return TidStop{Exited: true}, true, nil
}

// Signals the injection tells apart.
const (
	SIGSEGV = int(unix.SIGSEGV)
	SIGBUS  = int(unix.SIGBUS)
	SIGILL  = int(unix.SIGILL)
	SIGFPE  = int(unix.SIGFPE)
	SIGTRAP = int(unix.SIGTRAP)
	SIGSTOP = int(unix.SIGSTOP)
	SIGABRT = int(unix.SIGABRT)
)
