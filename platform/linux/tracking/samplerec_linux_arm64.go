package tracking

// SampleNRegs is the user registers a sample record carries (NREGS of
// platform/linux/ebpf/bpf/rawstack.bpf.c): perf's arm64 order
// (arch.PerfRegsARM64), x0-x30, sp, pc.
const SampleNRegs = 33

// sampleReg returns the index in a record's registers of perf register
// p: perf's own order.
func sampleReg(p int) (int, bool) { return p, p >= 0 && p < SampleNRegs }
