//go:build !linux

package snapshot

import (
	"runtime"

	"github.com/rawstack/rawstack/platform"
)

// Dump copies a live process's state; it needs Linux.
func Dump(pid int) (*Image, error) {
	return nil, &platform.NotSupportedError{Feature: "dump of a live process", Reason: "not implemented on " + runtime.GOOS}
}
