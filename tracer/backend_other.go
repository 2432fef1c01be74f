//go:build !linux && !windows

package tracer

import (
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
func openBackend(opts Options, h platform.Handler) (backend, error) {
	_, err := linux.Open(platform.Config{}, h)
	return nil, err
}

var t0 = time.Now()

func monotonic() int64 { return int64(time.Since(t0)) }
func gettid() int      { return 0 }
