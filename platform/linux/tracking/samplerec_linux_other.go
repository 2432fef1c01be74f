//go:build linux && !amd64 && !arm64

package tracking

// SampleNRegs: no eBPF programs or allocation sampler are built for this
// architecture, so no record carries registers.
const SampleNRegs = 0

func sampleReg(int) (int, bool) { return 0, false }
