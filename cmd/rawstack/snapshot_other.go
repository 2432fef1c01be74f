//go:build !linux

package main

// quietStopSignals does nothing where snapshots do not use ptrace.
func quietStopSignals() (restore func()) { return func() {} }
