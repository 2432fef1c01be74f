//go:build linux

package main

import (
	"os"
	"syscall"
)

// maxRSS returns ru_maxrss (KiB) of a finished process.
func maxRSS(st *os.ProcessState) int64 {
	if ru, ok := st.SysUsage().(*syscall.Rusage); ok {
		return ru.Maxrss
	}
	return 0
}
