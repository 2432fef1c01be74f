//go:build linux

package tracer

import (
	"os"
	"os/exec"

	"github.com/rawstack/rawstack/format"
	sys "github.com/rawstack/rawstack/internal/unix"
	"github.com/rawstack/rawstack/platform"
	"github.com/rawstack/rawstack/platform/linux"
)

const (
	hostOS    = format.OSLinux
	hostClock = format.ClockMonotonic
)

func openBackend(cfg platform.Config, cmd *exec.Cmd, h platform.Handler) (backend, error) {
	if cmd != nil {
		return linux.Launch(cmd, cfg, h)
	}
	return linux.Open(cfg, h)
}

func monotonic() int64 { return sys.Monotonic() }
func gettid() int      { return sys.Gettid() }

// readSelf reads p from this process's memory at addr, failing instead
// of faulting where nothing is mapped (process_vm_readv).
func readSelf(addr uintptr, p []byte) bool {
	iov := [1]sys.RemoteIovec{{Base: addr, Len: len(p)}}
	n, err := sys.ProcessVMRead(os.Getpid(), p, iov[:])
	return err == nil && n == len(p)
}
