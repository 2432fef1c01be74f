//go:build linux && !amd64 && !arm64

package ebpf

import (
	"context"
	"os/exec"

	"github.com/rawstack/rawstack/platform"
	"github.com/rawstack/rawstack/platform/linux/tracking"
)

// Session is the eBPF back end's session; on this architecture it cannot
// be opened.
type Session struct {
	*tracking.Tracker
}

func errBPFArch() error {
	return &platform.NotSupportedError{Feature: "eBPF back end", Reason: "its BPF programs are built for x86-64 and arm64 only"}
}

func init() {
	tracking.RegisterEBPF(tracking.Backend{
		Probe: Probe,
		Open: func(platform.Config, platform.Handler) (tracking.Session, error) {
			return nil, errBPFArch()
		},
		Launch: func(*exec.Cmd, platform.Config, platform.Handler) (tracking.Session, error) {
			return nil, errBPFArch()
		},
	})
}

// Probe returns an error wrapping platform.ErrNotSupported: the eBPF
// back end runs on x86-64 and arm64 only.
func Probe() error { return errBPFArch() }

// Open returns an error wrapping platform.ErrNotSupported.
func Open(cfg platform.Config, h platform.Handler) (*Session, error) { return nil, errBPFArch() }

// Launch returns an error wrapping platform.ErrNotSupported.
func Launch(cmd *exec.Cmd, cfg platform.Config, h platform.Handler) (*Session, error) {
	return nil, errBPFArch()
}

// Run returns an error wrapping platform.ErrNotSupported.
func (s *Session) Run(ctx context.Context) error { return errBPFArch() }

// ReadAll does nothing.
func (s *Session) ReadAll() {}

// BPFRingBytes returns 0: no eBPF back end here.
func (s *Session) BPFRingBytes() uint64 { return 0 }
