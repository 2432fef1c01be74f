// Package procinfo answers the questions about a target process that turn
// a bare EPERM into an error a user can act on: is it a kernel thread, and
// which process already traces it. It reads /proc; where there is none
// every answer is "no".
package procinfo

import (
	"bytes"
	"os"
	"strconv"
	"strings"
)

// pfKthread is PF_KTHREAD in the flags field of /proc/PID/stat.
const pfKthread = 0x00200000

// KernelThread reports whether pid is a kernel thread (kthreadd and its
// children): no user address space, nothing to unwind.
func KernelThread(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	// pid (comm) state ppid pgrp session tty_nr tpgid flags ...; comm may
	// hold spaces and parentheses, so fields count from the last ')'.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return false
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 7 {
		return false
	}
	flags, err := strconv.ParseUint(f[6], 10, 64)
	return err == nil && flags&pfKthread != 0
}

// Tracer returns the pid of the process tracing pid (TracerPid in
// /proc/PID/status) and that process's name; 0 when none.
func Tracer(pid int) (int, string) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0, ""
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "TracerPid:"); ok {
			n, _ := strconv.Atoi(strings.TrimSpace(v))
			if n == 0 {
				return 0, ""
			}
			return n, Comm(n)
		}
	}
	return 0, ""
}

// Comm returns the command name of pid, "" if unknown.
func Comm(pid int) string {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/comm")
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}
