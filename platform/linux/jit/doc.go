// Package jit follows, while a Linux session records, the code that JIT
// runtimes publish for profilers: perf maps (/tmp/perf-PID.map) and
// jitdump files (jit-PID.dump), tailed while recording and read once more
// when the process exits. A [Tracker] reports their contents to a
// [platform.JITHandler]; both Linux back ends (packages platform/linux/perf
// and platform/linux/ebpf) drive one, through package
// platform/linux/tracking.
package jit
