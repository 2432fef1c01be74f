//go:build !linux && !windows

package tracer

import (
	"os/exec"
	"time"

	"github.com/rawstack/rawstack/format"
	"github.com/rawstack/rawstack/platform"
	"github.com/rawstack/rawstack/platform/linux"
)

const (
	hostOS    = format.OSUnknown
	hostClock = format.ClockUnknown
)

// openBackend: no back end for this OS yet; the Linux package's stub
// returns an error wrapping platform.ErrNotSupported.
func openBackend(cfg platform.Config, cmd *exec.Cmd, h platform.Handler) (backend, error) {
	_, err := linux.Open(cfg, h)
	return nil, err
}

var t0 = time.Now()

func monotonic() int64 { return int64(time.Since(t0)) }
func gettid() int      { return 0 }

// readSelf reads nothing here: goroutines started in a linked span do
// not inherit its link.
func readSelf(addr uintptr, p []byte) bool { return false }
