package tracking

import (
	"context"
	"os/exec"

	"github.com/rawstack/rawstack/platform"
)

// Session is what a Linux back end's session provides; package
// platform/linux returns it from Open and Launch, whichever back end
// samples.
type Session interface {
	// Pid returns the target process id (0 for the whole host).
	Pid() int
	// Event names the perf event sampled: "cycles" or "cpu-clock".
	Event() string
	// KernelFrames reports whether kernel frames are recorded.
	KernelFrames() bool
	// ExitErr returns cmd.Wait's result for a launched command once it
	// has exited, and nil before.
	ExitErr() error
	// Stats returns the running totals.
	Stats() platform.Stats
	// Run reads and reports events until ctx is done or the target is
	// gone, then reads what is left and returns.
	Run(ctx context.Context) error
	// ReadAll reads every record now in the rings and reports it.
	ReadAll()
	// JITErrors returns the first problems met reading perf maps and
	// jitdump files.
	JITErrors() []error
	// Close stops sampling and releases what the session holds.
	Close() error
}

// Backend is a back end that package platform/linux reaches only when
// it is linked in: the eBPF one, which package platform/linux/ebpf
// registers when it is imported, so that programs that do not import it
// do not link github.com/cilium/ebpf.
type Backend struct {
	Probe  func() error
	Open   func(platform.Config, platform.Handler) (Session, error)
	Launch func(*exec.Cmd, platform.Config, platform.Handler) (Session, error)
}

var ebpfBackend *Backend

// RegisterEBPF installs the eBPF back end. Package platform/linux/ebpf
// calls it from its init.
func RegisterEBPF(b Backend) { ebpfBackend = &b }

// EBPF returns the eBPF back end, or nil when package platform/linux/ebpf
// is not linked into the program.
func EBPF() *Backend { return ebpfBackend }
