//go:build !amd64 && !arm64

package goself

// G returns 0 here: the g is read on amd64 and arm64 only.
func G() uintptr { return 0 }
