//go:build linux

package tracer

import (
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
