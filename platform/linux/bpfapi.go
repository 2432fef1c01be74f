package linux

// BPFSpec says how the eBPF back end's programs are to be loaded.
type BPFSpec struct {
	All        bool // sample every process, not only those selected
	CopyStack  bool // user registers and a stack window; else the frame-pointer walk
	StackBytes int  // the window, at most 16 KiB
	SelfPid    int  // the recorder, never sampled off CPU
	RingBytes  int  // BPF ring buffer size, a power of two
	// WakeupBytes: the programs wake the reader only once this many bytes
	// wait in the ring buffer (0: on the first record after each read);
	// the reader then reads on a timer too.
	WakeupBytes int
	OffCPU      bool // load the sched_switch program
}

// BPFPrograms is the kernel side of the eBPF back end, as package
// platform/linux/ebpf loads it: the programs, their maps and the ring
// buffer the session reads. Its methods are called from one goroutine.
type BPFPrograms interface {
	// Select adds a process whose samples are wanted (when not All).
	Select(pid uint32) error
	// PerfProgramFD is the program to attach to each CPU's perf event.
	PerfProgramFD() int
	// Start lets the programs record (and attaches the off-CPU one).
	Start() error
	// RingFD is the ring buffer's file descriptor, for poll.
	RingFD() int
	// Next returns the ring buffer's next record, valid until the next
	// call, or false when there is none now. It never blocks.
	Next() ([]byte, bool)
	// Lost is how many records the programs could not write so far:
	// ring is for want of room in the ring buffer, offCPU for want of
	// room in the map of threads off CPU.
	Lost() (ring, offCPU uint64)
	Close() error
}

var (
	bpfProbeFn func() error
	bpfLoadFn  func(BPFSpec) (BPFPrograms, error)
)

// RegisterBPF installs the eBPF back end's kernel side. Package
// platform/linux/ebpf calls it when it is imported; without it the eBPF
// back end reports that it is not linked in.
func RegisterBPF(probe func() error, load func(BPFSpec) (BPFPrograms, error)) {
	bpfProbeFn, bpfLoadFn = probe, load
}

// BPFLinked reports whether package platform/linux/ebpf is linked into
// the program, so that the eBPF back end can load its programs.
func BPFLinked() bool { return bpfLoadFn != nil }
