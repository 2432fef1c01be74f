package ebpf

import _ "embed"

// object is bpf/rawstack.bpf.c compiled for arm64 by bpf/build.sh.
//
//go:embed bpf/rawstack_arm64_bpfel.o
var object []byte

const (
	// bpfNRegs is NREGS of bpf/rawstack.bpf.c: the user registers a
	// record carries, in perf order (arch.PerfRegsARM64: x0-x30, sp, pc).
	bpfNRegs = 33
	// libTriple names the multiarch library directories.
	libTriple = "aarch64-linux-gnu"
	// shimBuilt says the preloaded allocation sampler (package allocshim)
	// is built for this architecture: not yet on arm64, where a launched
	// command's allocator gets the uprobes a running process's gets.
	shimBuilt = false
)

// recordReg returns the index in a record's registers of perf register
// p: the record holds perf's arm64 order, x0-x30, sp, pc.
func recordReg(p int) (int, bool) { return p, p >= 0 && p < bpfNRegs }
