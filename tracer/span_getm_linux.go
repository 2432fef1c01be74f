//go:build linux && (amd64 || arm64)

package tracer

const haveGetM = true

func getm() uintptr
