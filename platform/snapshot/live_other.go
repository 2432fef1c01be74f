//go:build !linux

package snapshot

import (
	"runtime"

	"github.com/rawstack/rawstack/platform"
)

// Process snapshots a live process; it needs Linux.
func Process(pid int, opts *Options) (*Snapshot, error) {
	return nil, &platform.NotSupportedError{Feature: "snapshot of a live process", Reason: "not implemented on " + runtime.GOOS}
}
