package crc

import "sync"

var (
	sse42Once sync.Once
	sse42     bool
)

// hasSSE42 asks CPUID once, on first use (not at program start: under a
// hypervisor CPUID is an exit, tens of microseconds).
func hasSSE42() bool {
	sse42Once.Do(func() { sse42 = cpuidECX1()&(1<<20) != 0 })
	return sse42
}

// cpuidECX1 returns ECX of CPUID leaf 1.
func cpuidECX1() uint32

// castagnoliSSE42 is Castagnoli with the CRC32 instruction.
func castagnoliSSE42(crc uint32, p []byte) uint32
