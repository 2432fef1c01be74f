//go:build !linux && !windows

package snapshot

import (
	"runtime"

	"github.com/rawstack/rawstack/platform"
)

// Process snapshots a live process; it needs Linux.
func Process(pid int, opts *Options) (*Snapshot, error) {
	return nil, &platform.NotSupportedError{Feature: "snapshot of a live process", Reason: "not implemented on " + runtime.GOOS}
}

// ProcessMinidump captures a live process as a minidump; it needs Windows.
func ProcessMinidump(pid int) (*Minidump, error) {
	return nil, &platform.NotSupportedError{Feature: "minidump of a live process", Reason: "Windows only, not " + runtime.GOOS}
}
