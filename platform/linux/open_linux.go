//go:build linux

package linux

import (
	"os/exec"

	"github.com/rawstack/rawstack/platform"
	"github.com/rawstack/rawstack/platform/linux/perf"
	"github.com/rawstack/rawstack/platform/linux/tracking"
)

// Open starts sampling the running process cfg.Pid (0: the caller), or
// with the eBPF back end and cfg.System every process of the host, with
// the back end cfg.Backend names.
func Open(cfg platform.Config, h platform.Handler) (Session, error) {
	if err := checkConfig(cfg); err != nil {
		return nil, err
	}
	if cfg.Backend == platform.BackendEBPF {
		b := tracking.EBPF()
		if b == nil {
			return nil, errNotLinked()
		}
		return b.Open(cfg, h)
	}
	s, err := perf.Open(cfg, h)
	if err != nil {
		return nil, err
	}
	return s, nil
}

// Launch starts cmd (not yet started) stopped at its first instruction,
// attaches to it with the back end cfg.Backend names and lets it run. The
// caller must not call cmd.Wait: the session reaps the command;
// [Session].ExitErr reports how it ended.
func Launch(cmd *exec.Cmd, cfg platform.Config, h platform.Handler) (Session, error) {
	if err := checkConfig(cfg); err != nil {
		return nil, err
	}
	if cfg.Backend == platform.BackendEBPF {
		b := tracking.EBPF()
		if b == nil {
			return nil, errNotLinked()
		}
		return b.Launch(cmd, cfg, h)
	}
	s, err := perf.Launch(cmd, cfg, h)
	if err != nil {
		return nil, err
	}
	return s, nil
}

// Probe reports whether sampling with perf_event_open works here. When it
// does not, the error wraps platform.ErrNotSupported (the kernel lacks it),
// is a *platform.PermissionError (no privilege) or is neither (the probe's
// attribute was refused: a bug, not a missing feature).
func Probe() error { return tracking.ProbePerf() }

// ProbeBPF reports whether the eBPF back end can run here: linked into
// the program, the kernel features it uses (BTF, ring buffers, perf-event
// and tracing programs) and the capabilities it needs. The error wraps
// platform.ErrNotSupported for a missing feature, and is a
// *platform.PermissionError naming the capabilities for missing
// privileges.
func ProbeBPF() error {
	b := tracking.EBPF()
	if b == nil {
		return errNotLinked()
	}
	return b.Probe()
}

// BPFLinked reports whether package platform/linux/ebpf is linked into
// the program, so that the eBPF back end can load its programs.
func BPFLinked() bool { return tracking.EBPF() != nil }

func errNotLinked() error {
	return &platform.NotSupportedError{Feature: "eBPF back end", Reason: "not linked into this program: import github.com/rawstack/rawstack/platform/linux/ebpf (the rawstack command runs rawstack-ebpf for it)"}
}
