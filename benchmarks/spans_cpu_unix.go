//go:build unix

package main

import (
	"syscall"
	"time"
)

// spansCPU is the CPU time (user + system) this process has used: every
// goroutine of it, the tracers' drain and writer goroutines included.
func spansCPU() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
