//go:build linux && (amd64 || arm64)

package ebpf

// bpfSpec says how the eBPF back end's programs are to be loaded.
type bpfSpec struct {
	All        bool // sample every process, not only those selected
	CopyStack  bool // user registers and a stack window; else the frame-pointer walk
	StackBytes int  // the window, at most 16 KiB
	SelfPid    int  // the recorder, never sampled off CPU
	RingBytes  int  // BPF ring buffer size, a power of two
	// WakeupBytes: the programs wake the reader only once this many bytes
	// wait in the ring buffer (0: on the first record after each read);
	// the reader then reads on a timer too.
	WakeupBytes int
	// WakeNew: the first sample of each process wakes the reader too.
	WakeNew bool
	// JITWake, when not 0: a sample of a process in jit_procs
	// (SetV8Process) wakes the reader too, at most once in JITWake
	// nanoseconds across the host.
	JITWake int64
	OffCPU  bool // load the sched_switch program
	// AllocRate, when not 0, loads the allocator programs, sampling one
	// allocated byte in AllocRate on average.
	AllocRate int
	// Python: the cpu-clock program reads the Python frames of the
	// threads the recorder puts in py_threads (else that map is shrunk).
	Python bool
	// GoRegs: in frame-pointer mode, samples carry the stack pointer and
	// the g register (RS_GREGS), for goroutines and the g register.
	GoRegs bool
}
