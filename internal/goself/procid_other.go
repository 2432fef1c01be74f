//go:build !linux

package goself

// threadID is 0 where m.procid is not probed.
func threadID() uint64 { return 0 }
