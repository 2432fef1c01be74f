//go:build unix

package main

import (
	"os"
	"syscall"
)

// maxRSSKiB is the peak resident set of a reaped process, in KiB.
func maxRSSKiB(st *os.ProcessState) float64 {
	if ru, ok := st.SysUsage().(*syscall.Rusage); ok {
		return float64(ru.Maxrss)
	}
	return 0
}
