//go:build !unix

package main

import "os"

// minorFaults is unknown off Unix.
func minorFaults(*os.ProcessState) int64 { return 0 }
