package tracking

// SampleNRegs is the user registers a sample record carries (NREGS of
// platform/linux/ebpf/bpf/rawstack.bpf.c): perf's x86-64 order
// (arch.PerfRegsAMD64) without flags and segment registers.
const SampleNRegs = 17

// sampleReg returns the index in a record's registers of perf register
// p: perf's order without the flags and segment registers (perf 9-15).
func sampleReg(p int) (int, bool) {
	switch {
	case p >= 0 && p <= 8:
		return p, true
	case p >= 16 && p-7 < SampleNRegs:
		return p - 7, true
	}
	return 0, false
}
