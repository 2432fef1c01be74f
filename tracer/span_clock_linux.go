package tracer

import _ "unsafe" // go:linkname

// nanotime is the runtime's CLOCK_MONOTONIC read through the vDSO: the
// clock of the stream (and of perf's samples), without the system call
// that x/sys's ClockGettime makes.
//
//go:linkname nanotime runtime.nanotime
func nanotime() int64

func spanNow() int64 { return nanotime() }
