//go:build linux

package unix

import (
	"os"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// PerfEventAttr is struct perf_event_attr.
type PerfEventAttr = unix.PerfEventAttr

// Errno values the back end tests for.
const (
	EACCES     = unix.EACCES
	EPERM      = unix.EPERM
	ENOENT     = unix.ENOENT
	ENOSYS     = unix.ENOSYS
	ENODEV     = unix.ENODEV
	ESRCH      = unix.ESRCH
	EINVAL     = unix.EINVAL
	ENOMEM     = unix.ENOMEM
	EOPNOTSUPP = unix.EOPNOTSUPP
	EINTR      = unix.EINTR
	EBUSY      = unix.EBUSY
	EMFILE     = unix.EMFILE
	E2BIG      = unix.E2BIG
)

// perf_event_attr constants.
const (
	PerfTypeHardware = unix.PERF_TYPE_HARDWARE
	PerfTypeSoftware = unix.PERF_TYPE_SOFTWARE

	PerfCountHWCPUCycles = unix.PERF_COUNT_HW_CPU_CYCLES
	PerfCountSWCPUClock  = unix.PERF_COUNT_SW_CPU_CLOCK

	PerfSampleIP        = unix.PERF_SAMPLE_IP
	PerfSampleTID       = unix.PERF_SAMPLE_TID
	PerfSampleTime      = unix.PERF_SAMPLE_TIME
	PerfSampleCPU       = unix.PERF_SAMPLE_CPU
	PerfSamplePeriod    = unix.PERF_SAMPLE_PERIOD
	PerfSampleCallchain = unix.PERF_SAMPLE_CALLCHAIN

	PerfBitDisabled      = unix.PerfBitDisabled
	PerfBitInherit       = unix.PerfBitInherit
	PerfBitExcludeKernel = unix.PerfBitExcludeKernel
	PerfBitExcludeHv     = unix.PerfBitExcludeHv
	PerfBitMmap          = unix.PerfBitMmap
	PerfBitComm          = unix.PerfBitComm
	PerfBitFreq          = unix.PerfBitFreq
	PerfBitTask          = unix.PerfBitTask
	PerfBitWatermark     = unix.PerfBitWatermark
	PerfBitSampleIDAll   = unix.PerfBitSampleIDAll
	PerfBitMmap2         = unix.PerfBitMmap2
	PerfBitCommExec      = unix.PerfBitCommExec
	PerfBitUseClockID    = unix.PerfBitUseClockID

	PerfFlagFDCloexec = unix.PERF_FLAG_FD_CLOEXEC

	ClockMonotonic = unix.CLOCK_MONOTONIC
)

// PerfEventOpen wraps perf_event_open(2); the fd is close-on-exec.
func PerfEventOpen(attr *PerfEventAttr, pid, cpu, groupFD int) (int, error) {
	attr.Size = uint32(unsafe.Sizeof(*attr))
	return unix.PerfEventOpen(attr, pid, cpu, groupFD, unix.PERF_FLAG_FD_CLOEXEC)
}

// PerfSetOutput redirects the records of fd into the ring buffer of target.
func PerfSetOutput(fd, target int) error {
	return unix.IoctlSetInt(fd, unix.PERF_EVENT_IOC_SET_OUTPUT, target)
}

// PerfEnable and PerfDisable start and stop counting on fd.
func PerfEnable(fd int) error  { return unix.IoctlSetInt(fd, unix.PERF_EVENT_IOC_ENABLE, 0) }
func PerfDisable(fd int) error { return unix.IoctlSetInt(fd, unix.PERF_EVENT_IOC_DISABLE, 0) }

// MmapShared maps size bytes of fd read-write and shared.
func MmapShared(fd, size int) ([]byte, error) {
	return unix.Mmap(fd, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
}

// MmapRead maps size bytes of fd from offset off read-only and shared.
func MmapRead(fd int, off int64, size int) ([]byte, error) {
	return unix.Mmap(fd, off, size, unix.PROT_READ, unix.MAP_SHARED)
}

// DropPages takes the pages of b, a read-only file mapping, out of this
// process's resident set (madvise MADV_DONTNEED): they stay in the page
// cache, and a later access maps them again (a minor fault).
func DropPages(b []byte) error { return unix.Madvise(b, unix.MADV_DONTNEED) }

// Munmap unmaps b.
func Munmap(b []byte) error { return unix.Munmap(b) }

// Close closes fd.
func Close(fd int) error { return unix.Close(fd) }

// PollIn waits up to timeoutMs for any of fds to become readable or hung up
// and returns how many are.
func PollIn(fds []PollFd, timeoutMs int) (int, error) {
	n, err := unix.Poll(fds, timeoutMs)
	if err == unix.EINTR {
		return 0, nil
	}
	return n, err
}

// PollFd is struct pollfd.
type PollFd = unix.PollFd

// Poll event bits.
const (
	POLLIN  = unix.POLLIN
	POLLHUP = unix.POLLHUP
	POLLERR = unix.POLLERR
)

// Gettid returns the calling thread's id.
func Gettid() int { return unix.Gettid() }

// Getpid returns the process id.
func Getpid() int { return os.Getpid() }

// Monotonic returns CLOCK_MONOTONIC in ns, the clock perf stamps records
// with. x/sys's ClockGettime is a system call; the recorder asks for the
// time once per sample, so Monotonic reads it once and then adds the
// runtime's monotonic clock (CLOCK_MONOTONIC too, read through the vDSO)
// elapsed since.
func Monotonic() int64 {
	mono.once.Do(func() {
		// The narrowest of a few brackets, in case one was preempted.
		best := time.Duration(1<<63 - 1)
		for i := 0; i < 5; i++ {
			var ts unix.Timespec
			t0 := time.Now()
			_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
			t1 := time.Now()
			if d := t1.Sub(t0); d < best {
				best, mono.ref, mono.base = d, t0.Add(d/2), ts.Nano()
			}
		}
	})
	return mono.base + int64(time.Since(mono.ref))
}

var mono struct {
	once sync.Once
	base int64     // CLOCK_MONOTONIC at ref
	ref  time.Time // with its monotonic reading
}

// LockFile takes an exclusive flock(2) lock on f, waiting while another
// open file description holds it; closing f releases it.
func LockFile(f *os.File) error {
	for {
		err := unix.Flock(int(f.Fd()), unix.LOCK_EX)
		if err != unix.EINTR {
			return err
		}
	}
}

// ProcessAlive reports whether pid exists (zombies count as alive).
func ProcessAlive(pid int) bool {
	err := unix.Kill(pid, 0)
	return err == nil || err == unix.EPERM
}

// WaitStopped waits for the traced child pid to stop and returns the
// signal that stopped it, or exited=true when it exited instead.
func WaitStopped(pid int) (sig int, exited bool, status int, err error) {
	var ws unix.WaitStatus
	for {
		_, err = unix.Wait4(pid, &ws, unix.WALL, nil)
		if err != unix.EINTR {
			break
		}
	}
	if err != nil {
		return 0, false, 0, err
	}
	if ws.Stopped() {
		return int(ws.StopSignal()), false, 0, nil
	}
	return 0, true, ws.ExitStatus(), nil
}

// PtraceDetach detaches from a stopped tracee and lets it run. It must be
// called from the OS thread that started the tracee.
func PtraceDetach(pid int) error { return unix.PtraceDetach(pid) }

// RingHead loads data_head of a perf ring buffer's control page with acquire
// semantics; RingSetTail stores data_tail with release semantics.
func RingHead(meta []byte) uint64 {
	return atomic.LoadUint64((*uint64)(unsafe.Pointer(&meta[perfDataHeadOff])))
}

// RingSetTail publishes how far the reader has consumed.
func RingSetTail(meta []byte, tail uint64) {
	atomic.StoreUint64((*uint64)(unsafe.Pointer(&meta[perfDataTailOff])), tail)
}

// RingDataOffset returns data_offset and data_size of the control page
// (0, 0 on kernels that predate them).
func RingDataOffset(meta []byte) (off, size uint64) {
	var p *unix.PerfEventMmapPage = (*unix.PerfEventMmapPage)(unsafe.Pointer(&meta[0]))
	return p.Data_offset, p.Data_size
}

var (
	perfDataHeadOff = unsafe.Offsetof(unix.PerfEventMmapPage{}.Data_head)
	perfDataTailOff = unsafe.Offsetof(unix.PerfEventMmapPage{}.Data_tail)
)

// PageSize is the system page size.
var PageSize = os.Getpagesize()

// ThreadCPUTime returns the calling thread's CPU time in ns.
func ThreadCPUTime() int64 {
	var ts unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts)
	return ts.Nano()
}
