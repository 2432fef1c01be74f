//go:build !linux

package snapshot

import (
	"runtime"
	"time"

	"github.com/rawstack/rawstack/platform"
)

// Frozen reads a stopped live process; it needs Linux.
func Frozen(pid int, f func(threads []ImageThread, read func([]MemRead)) error) (int64, time.Duration, error) {
	return 0, 0, &platform.NotSupportedError{Feature: "frozen read of a live process", Reason: "not implemented on " + runtime.GOOS}
}

// ReadLive reads a running process's memory; it needs Linux: every read
// fails.
func ReadLive(pid int, rs []MemRead) {
	for i := range rs {
		rs[i].OK = false
	}
}
