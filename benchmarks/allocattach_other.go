//go:build !linux

package main

import "errors"

// attachRounds needs Linux (ptrace, eBPF); the alloc scenario runs there
// only.
func attachRounds(cfg *config, rawstack, heaptrack string, rounds int) ([]row, error) {
	return nil, errors.New("record --alloc -p PID needs Linux")
}
