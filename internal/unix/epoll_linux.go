//go:build linux

package unix

import (
	"os"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Waiter waits for any of a set of file descriptors (perf events, BPF ring
// buffers) to become readable, parked in Go's network poller: the set is
// an epoll instance, itself registered with the runtime. A goroutine
// blocked in poll(2) instead holds its P in a system call, and the
// runtime's sysmon thread, which retakes such Ps, then wakes every 20 µs
// for as long as the call lasts: a recorder that spends its life waiting
// in poll pays a third of its CPU time for that.
type Waiter struct {
	epfd int
	f    *os.File
	rc   interface {
		Read(func(fd uintptr) bool) error
	}
	evs [16]unix.EpollEvent
}

// NewWaiter returns an empty Waiter.
func NewWaiter() (*Waiter, error) {
	epfd, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		return nil, err
	}
	if err := unix.SetNonblock(epfd, true); err != nil {
		unix.Close(epfd)
		return nil, err
	}
	// A non-blocking descriptor given to os.NewFile joins the poller.
	w := &Waiter{epfd: epfd, f: os.NewFile(uintptr(epfd), "epoll")}
	rc, err := w.f.SyscallConn()
	if err != nil {
		w.f.Close()
		return nil, err
	}
	w.rc = rc
	return w, nil
}

// Add watches fd for readability (level-triggered).
func (w *Waiter) Add(fd int) error {
	return unix.EpollCtl(w.epfd, unix.EPOLL_CTL_ADD, fd, &unix.EpollEvent{Events: unix.EPOLLIN, Fd: int32(fd)})
}

// Wait returns when a watched descriptor is readable or hung up, or after
// timeout.
func (w *Waiter) Wait(timeout time.Duration) error {
	if err := w.f.SetReadDeadline(time.Now().Add(timeout)); err != nil {
		return err
	}
	var werr error
	woken := false
	err := w.rc.Read(func(uintptr) bool {
		// Called again after the poller saw the set readable: that is a
		// wakeup, though the set's own wait may now find nothing. A perf
		// event's poll reports a wakeup once and clears it, and the
		// runtime's check of the set's readiness has polled it already
		// (that check polls every watched descriptor): waiting for the set
		// to say so again left each wakeup to the timeout, reading
		// samples up to that late.
		if woken {
			return true
		}
		woken = true
		// A wait of no time, made as a raw system call: through
		// syscall.Syscall, this first system call of each wakeup woke the
		// runtime's sysmon thread from its deep sleep, to poll every 20 µs
		// while the reader ran (a quarter of a whole-host agent's CPU
		// time).
		n, _, e := unix.RawSyscall6(unix.SYS_EPOLL_PWAIT, uintptr(w.epfd), uintptr(unsafe.Pointer(&w.evs[0])), uintptr(len(w.evs)), 0, 0, 0)
		if e != 0 && e != unix.EINTR {
			werr = e
			return true
		}
		return e == 0 && n > 0
	})
	if err != nil && !os.IsTimeout(err) {
		return err
	}
	return werr
}

// Close releases the epoll instance (not the watched descriptors).
func (w *Waiter) Close() error { return w.f.Close() }

// NewWake returns an eventfd (non-blocking, close-on-exec) for Wake: in
// a Waiter's set or a poll(2) list, it makes the wait return at once.
func NewWake() (int, error) {
	return unix.Eventfd(0, unix.EFD_NONBLOCK|unix.EFD_CLOEXEC)
}

// Wake makes fd, an eventfd of NewWake, readable until it is read.
func Wake(fd int) {
	one := [8]byte{1}
	unix.Write(fd, one[:])
}
