//go:build !amd64

package crc

func hasSSE42() bool { return false }

func castagnoliSSE42(crc uint32, p []byte) uint32 { panic("crc: no SSE4.2") }
