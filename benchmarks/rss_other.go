//go:build !unix

package main

import "os"

// maxRSSKiB is not measured on this OS.
func maxRSSKiB(st *os.ProcessState) float64 { return 0 }
