//go:build windows

package tracer

import (
	"os/exec"
	"sync"

	"github.com/rawstack/rawstack/format"
	"github.com/rawstack/rawstack/internal/win"
	"github.com/rawstack/rawstack/platform"
	"github.com/rawstack/rawstack/platform/windows"
)

const (
	hostOS    = format.OSWindows
	hostClock = format.ClockQPC
)

func openBackend(cfg platform.Config, cmd *exec.Cmd, h platform.Handler) (backend, error) {
	if cmd != nil {
		return windows.Launch(cmd, cfg, h)
	}
	return windows.Open(cfg, h)
}

var qpcFrequency = sync.OnceValue(win.QPCFrequency)

// monotonic is QueryPerformanceCounter in ns, the clock the back end
// stamps samples with.
func monotonic() int64 {
	t, qpcFreq := win.QPC(), qpcFrequency()
	return t/qpcFreq*1e9 + t%qpcFreq*1e9/qpcFreq
}

func gettid() int { return int(win.CurrentThreadID()) }

// readSelf reads nothing here: goroutines started in a linked span do
// not inherit its link.
func readSelf(addr uintptr, p []byte) bool { return false }
