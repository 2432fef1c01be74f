//go:build !linux

package linux

import (
	"os/exec"

	"github.com/rawstack/rawstack/platform"
)

func errNS() error {
	return &platform.NotSupportedError{Feature: "perf_event_open", Reason: "the Linux back end runs on Linux only"}
}

// Open returns an error wrapping platform.ErrNotSupported.
func Open(cfg platform.Config, h platform.Handler) (Session, error) { return nil, errNS() }

// Launch returns an error wrapping platform.ErrNotSupported.
func Launch(cmd *exec.Cmd, cfg platform.Config, h platform.Handler) (Session, error) {
	return nil, errNS()
}

// Probe returns an error wrapping platform.ErrNotSupported.
func Probe() error { return errNS() }

// ProbeBPF returns an error wrapping platform.ErrNotSupported.
func ProbeBPF() error { return errNS() }

// BPFLinked reports false: no eBPF back end here.
func BPFLinked() bool { return false }
