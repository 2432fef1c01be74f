package ebpf

import _ "embed"

// object is bpf/rawstack.bpf.c compiled for x86-64 by bpf/build.sh.
//
//go:embed bpf/rawstack_x86_bpfel.o
var object []byte

const (
	// bpfNRegs is NREGS of bpf/rawstack.bpf.c: the user registers a
	// record carries, in perf order (arch.PerfRegsAMD64).
	bpfNRegs = 17
	// libTriple names the multiarch library directories.
	libTriple = "x86_64-linux-gnu"
	// shimBuilt says the preloaded allocation sampler (package allocshim)
	// is built for this architecture.
	shimBuilt = true
)

// recordReg returns the index in a record's registers of perf register
// p: the record holds perf's order without the flags and segment
// registers (perf 9-15).
func recordReg(p int) (int, bool) {
	switch {
	case p <= 8:
		return p, true
	case p >= 16 && p-7 < bpfNRegs:
		return p - 7, true
	}
	return 0, false
}
