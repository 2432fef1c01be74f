//go:build !linux

package tracer

func spanNow() int64 { return monotonic() }
