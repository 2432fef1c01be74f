//go:build linux

package snapshot

import "github.com/rawstack/rawstack/platform"

// ProcessMinidump captures a live process as a minidump; it needs Windows
// (on Linux, Process snapshots live processes and cores hold their state).
func ProcessMinidump(pid int) (*Minidump, error) {
	return nil, &platform.NotSupportedError{Feature: "minidump of a live process", Reason: "Windows only"}
}
