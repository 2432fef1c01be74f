//go:build !linux

package main

import "os"

// maxRSS is unknown off Linux.
func maxRSS(st *os.ProcessState) int64 { return 0 }
