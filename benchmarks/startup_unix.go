//go:build unix

package main

import (
	"os"
	"syscall"
)

// minorFaults is the minor page faults of an exited process.
func minorFaults(ps *os.ProcessState) int64 {
	if ru, ok := ps.SysUsage().(*syscall.Rusage); ok {
		return ru.Minflt
	}
	return 0
}
