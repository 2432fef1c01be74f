//go:build linux

package tracer

import (
	"github.com/rawstack/rawstack/format"
	sys "github.com/rawstack/rawstack/internal/unix"
	"github.com/rawstack/rawstack/platform"
	"github.com/rawstack/rawstack/platform/linux"
)

const (
	hostOS    = format.OSLinux
	hostClock = format.ClockMonotonic
)

func openBackend(opts Options, h platform.Handler) (backend, error) {
	cfg := platform.Config{Pid: opts.Pid, Frequency: opts.Frequency, NoKernel: opts.NoKernel,
		Unwind: opts.Unwind, StackSize: opts.StackSize, KeepRaw: opts.KeepRaw,
		NoJIT: opts.NoJIT, JITCodeBytes: opts.JITCodeBytes, Goroutines: opts.Goroutines,
		Backend: opts.Backend, System: opts.System, OffCPU: opts.OffCPU}
	if opts.Command != nil {
		return linux.Launch(opts.Command, cfg, h)
	}
	return linux.Open(cfg, h)
}

func monotonic() int64 { return sys.Monotonic() }
func gettid() int      { return sys.Gettid() }
