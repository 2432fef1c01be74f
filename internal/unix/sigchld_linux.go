//go:build linux && (amd64 || arm64)

package unix

import (
	"unsafe"

	"golang.org/x/sys/unix"
)

// kernelSigaction is struct sigaction as rt_sigaction takes it on amd64
// and arm64.
type kernelSigaction struct {
	handler  uintptr
	flags    uint64
	restorer uintptr
	mask     uint64
}

const saNoCldStop = 0x1 // SA_NOCLDSTOP

// QuietChildStops sets SA_NOCLDSTOP on the process's SIGCHLD action,
// keeping its handler: the kernel then sends no SIGCHLD when a child or
// a tracee stops (wait4 is woken all the same), only when a child exits.
// A ptrace snapshot otherwise gets a signal per thread it stops. restore
// puts the action back as it was; a change made to SIGCHLD's action in
// between (os/signal.Notify) is undone by it.
func QuietChildStops() (restore func(), err error) {
	var old kernelSigaction
	if err := rtSigaction(unix.SIGCHLD, nil, &old); err != nil {
		return func() {}, err
	}
	if old.flags&saNoCldStop != 0 {
		return func() {}, nil
	}
	quiet := old
	quiet.flags |= saNoCldStop
	if err := rtSigaction(unix.SIGCHLD, &quiet, nil); err != nil {
		return func() {}, err
	}
	return func() { rtSigaction(unix.SIGCHLD, &old, nil) }, nil
}

func rtSigaction(sig unix.Signal, act, old *kernelSigaction) error {
	_, _, e := unix.RawSyscall6(unix.SYS_RT_SIGACTION, uintptr(sig), uintptr(unsafe.Pointer(act)), uintptr(unsafe.Pointer(old)), 8, 0, 0)
	if e != 0 {
		return e
	}
	return nil
}
