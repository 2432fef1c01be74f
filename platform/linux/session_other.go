//go:build !linux

package linux

import (
	"context"
	"os/exec"

	"github.com/rawstack/rawstack/platform"
)

// Session samples one target process. It is only implemented on Linux.
type Session struct{}

func errNS() error {
	return &platform.NotSupportedError{Feature: "perf_event_open", Reason: "the Linux back end runs on Linux only"}
}

// Open returns an error wrapping platform.ErrNotSupported.
func Open(cfg platform.Config, h platform.Handler) (*Session, error) { return nil, errNS() }

// Launch returns an error wrapping platform.ErrNotSupported.
func Launch(cmd *exec.Cmd, cfg platform.Config, h platform.Handler) (*Session, error) {
	return nil, errNS()
}

// Probe returns an error wrapping platform.ErrNotSupported.
func Probe() error { return errNS() }

// ProbeBPF returns an error wrapping platform.ErrNotSupported.
func ProbeBPF() error { return errNS() }

func (s *Session) Pid() int                      { return 0 }
func (s *Session) Event() string                 { return "" }
func (s *Session) KernelFrames() bool            { return false }
func (s *Session) ExitErr() error                { return nil }
func (s *Session) Stats() platform.Stats         { return platform.Stats{} }
func (s *Session) Run(ctx context.Context) error { return errNS() }
func (s *Session) ReadAll()                      {}
func (s *Session) Close() error                  { return nil }
func (s *Session) BPFRingBytes() uint64          { return 0 }
