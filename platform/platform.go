// Package platform holds what every per-OS back end shares: the events a
// back end reports to the tracer ([Handler]), how it is configured
// ([Config]) and the error it returns where the OS or kernel lacks a
// feature ([ErrNotSupported]).
//
// The back ends live in sub-packages (platform/linux, later
// platform/windows); each compiles on every OS and returns an error wrapping
// ErrNotSupported where it cannot work.
package platform

import (
	"errors"
	"fmt"

	"github.com/rawstack/rawstack/format"
)

// ErrNotSupported says the running OS or kernel lacks what was asked for.
var ErrNotSupported = errors.New("not supported")

// NotSupportedError names the missing feature and why it is missing.
type NotSupportedError struct {
	Feature string // e.g. "perf_event_open"
	Reason  string // e.g. "kernel.perf_event_paranoid=3"
}

func (e *NotSupportedError) Error() string {
	if e.Reason == "" {
		return fmt.Sprintf("%s: %v", e.Feature, ErrNotSupported)
	}
	return fmt.Sprintf("%s: %v: %s", e.Feature, ErrNotSupported, e.Reason)
}

// Is makes errors.Is(err, ErrNotSupported) true.
func (e *NotSupportedError) Is(target error) bool { return target == ErrNotSupported }

// OptionError says a back end was given an option it does not implement:
// which field of [Config], which back end on which OS, and why. Back ends
// check every field they are given and return this instead of ignoring
// one; errors.Is(err, ErrNotSupported) holds.
type OptionError struct {
	Option  string // the Config field, e.g. "OffCPU"
	Backend string // e.g. "perf", "ebpf", "suspend-and-copy"
	OS      string // e.g. "linux", "windows"
	Reason  string // what to use instead, or why not
}

func (e *OptionError) Error() string {
	msg := fmt.Sprintf("option %s is not supported by the %s back end on %s", e.Option, e.Backend, e.OS)
	if e.Reason != "" {
		msg += ": " + e.Reason
	}
	return msg
}

// Is makes errors.Is(err, ErrNotSupported) true.
func (e *OptionError) Is(target error) bool { return target == ErrNotSupported }

// PermissionError says the caller lacks a privilege the request needs, and
// which one.
type PermissionError struct {
	Op   string // what was attempted, e.g. "perf_event_open on pid 42"
	Need string // what is missing, e.g. "CAP_PERFMON or kernel.perf_event_paranoid<=1"
	Err  error
}

func (e *PermissionError) Error() string {
	return fmt.Sprintf("%s: %v (needs %s)", e.Op, e.Err, e.Need)
}

func (e *PermissionError) Unwrap() error { return e.Err }

// ErrKernelThread says the target is a kernel thread: it has no user
// stack to sample or unwind (a permission error would mislead).
var ErrKernelThread = errors.New("kernel thread, no user stack")

// TracedError says the target is already traced by another process (a
// debugger, strace): ptrace allows one tracer at a time.
type TracedError struct {
	Pid        int
	Tid        int    // the traced thread, when not the process's main thread
	Tracer     int    // TracerPid in /proc/PID/status
	TracerName string // its command name, "" if unknown
}

func (e *TracedError) Error() string {
	name := ""
	if e.TracerName != "" {
		name = " (" + e.TracerName + ")"
	}
	who := fmt.Sprintf("pid %d", e.Pid)
	if e.Tid != 0 && e.Tid != e.Pid {
		who += fmt.Sprintf(" tid %d", e.Tid)
	}
	return fmt.Sprintf("%s is already traced by pid %d%s: detach that tracer first", who, e.Tracer, name)
}

// Config says what a back end samples.
type Config struct {
	// Pid is the process to sample; 0 means the calling process.
	Pid int
	// Frequency is the sampling rate per thread in Hz; 0 means 99.
	Frequency int
	// NoKernel turns kernel frames off even where they are permitted.
	NoKernel bool
	// RingPages is the size of each ring buffer in pages (a power of two);
	// 0 picks a size that fits the unprivileged mlock budget.
	RingPages int
	// Unwind selects how user stacks are captured; the zero value is
	// frame pointers (the kernel walks them).
	Unwind UnwindMode
	// StackSize is how many bytes of user stack a DWARF or auto mode
	// sample copies (a multiple of 8, at most 65000); 0 means 8192 (512
	// for UnwindAuto on a frame-pointer program).
	StackSize int
	// KeepRaw, in DWARF or auto mode, reports each sample's registers and
	// stack copy (Sample.Stack) instead of unwinding them on the host.
	KeepRaw bool
	// Backend selects how samples are taken; the zero value is perf_event.
	Backend Backend
	// System samples every process of the host (BackendEBPF only); Pid
	// is then ignored.
	System bool
	// OffCPU also records where threads wait (BackendEBPF on Linux; the
	// Windows back end): a sample flagged format.SampleOffCPU, weighted
	// by the nanoseconds off CPU, each time a sampled thread comes back
	// on CPU.
	OffCPU bool
	// NoJIT turns off reading the perf maps and jitdump files of JIT
	// runtimes (see JITHandler).
	NoJIT bool
	// JITCodeBytes copies the machine code of each jitdump code load into
	// the trace (perf maps carry none).
	JITCodeBytes bool
	// Goroutines reads, for samples of Go code, the goroutine id and its
	// pprof labels from the target's memory (the g register from the
	// sample's user registers, field offsets from the executable's DWARF).
	Goroutines bool
	// SampleG records on each sample of user code the g register (R14
	// on amd64, X28 on arm64: the running goroutine's g in Go code) as
	// Sample.G. The in-process tracer sets it to find the goroutine of
	// each sample, which its spans' links follow. It costs 24 bytes a
	// sample in frame-pointer mode; the DWARF modes sample the registers
	// already.
	SampleG bool
	// Alloc records native heap allocations (either back end on Linux),
	// sampled by bytes in the target by the allocation sampler
	// (preloaded into a command, injected into a running process) or,
	// with BackendEBPF, where it cannot be, by uprobes on its allocator
	// (Stats.AllocMode says which), reported to an AllocHandler with the stack of the
	// allocation, which ends at the allocator's entry, and the frees of
	// sampled blocks.
	Alloc bool
	// AllocRate is Alloc's mean sampling interval in bytes: one sample
	// per AllocRate bytes allocated, a Poisson process over bytes as in
	// tcmalloc and the Go runtime; 0 means DefaultAllocRate.
	AllocRate int
	// NoPython turns off reading the Python frames of CPython threads
	// (on by default: each sample of a thread that runs Python code
	// carries the thread's Python frames, read from the interpreter's
	// state in the target's memory; package platform/linux/cpython).
	NoPython bool
	// BuildIDCache is the directory of the build-id cache (package
	// internal/idcache) the recorder copies into, while the processes
	// live, the files of the modules the host could not name later: a
	// module whose recorded path, in the host's mount namespace, is not
	// the file the process mapped (a container's), and a debug file the
	// process's root holds; "" means the default
	// ($RAWSTACK_BUILDID_CACHE, else the user cache directory's
	// rawstack/buildid). Every symbolizing command looks there first.
	BuildIDCache string
	// BuildIDCacheMax caps the cache's bytes (least recently used files
	// go first); 0 means 2 GiB.
	BuildIDCacheMax int64
	// NoBuildIDCache turns the cache off: modules of other mount
	// namespaces then stay module+offset once their files are gone.
	NoBuildIDCache bool
}

// How Config.Alloc samples (Stats.AllocMode). A launched command gets
// the allocation sampler preloaded (LD_PRELOAD): it samples in the
// process and, when samples copy the stack, writes its samples into a
// ring it shares with the recorder (AllocPreloadRing: no entry into the
// kernel at all); with frame pointers and BackendEBPF it traps into the
// kernel for sampled allocations only (AllocPreload; BackendPerf always
// uses the ring). A running process (Pid) gets the same sampler by
// injection (AllocInjectRing, AllocInject: ptrace, a remote dlopen, its
// modules' allocator slots redirected). Where that cannot be (a
// statically linked allocator, ptrace refused; Stats.AllocFallback says
// why) BackendEBPF puts uprobes on the allocator, which trap on every
// call, as for the whole host (System); BackendPerf refuses.
const (
	AllocPreloadRing = "the preloaded sampler (LD_PRELOAD), through a shared ring"
	AllocPreload     = "the preloaded sampler (LD_PRELOAD)"
	AllocInjectRing  = "the injected sampler (ptrace, dlopen), through a shared ring"
	AllocInject      = "the injected sampler (ptrace, dlopen)"
	AllocUprobes     = "uprobes on every allocator call"
)

// DefaultAllocRate is Config.AllocRate's default: 512 KiB, the Go
// runtime's MemProfileRate.
const DefaultAllocRate = 512 << 10

// Alloc is one sampled allocation: its block, the bytes and allocations
// it stands for (unbiased: Size/p and 1/p, p the probability that an
// allocation of Size bytes was sampled) and its stack, as a Sample's.
type Alloc struct {
	Time     int64
	Pid, Tid uint32
	Addr     uint64 // the block's address
	Size     uint64 // bytes the program asked for
	Bytes    uint64 // bytes this sample stands for
	Objects  uint64 // allocations this sample stands for
	PCs      []uint64
}

// AllocHandler receives Config.Alloc's events; a Handler that handles
// allocations implements it too.
type AllocHandler interface {
	// Alloc reports a sampled allocation. PCs is only valid during the
	// call.
	Alloc(a *Alloc)
	// Free reports that the sampled block at Addr of Pid was freed.
	Free(e *format.Free)
}

// Backend names a sampling mechanism of a back end.
type Backend uint8

const (
	// BackendPerf samples with perf_event ring buffers (Linux's default).
	BackendPerf Backend = iota
	// BackendEBPF samples with BPF programs on perf events and scheduler
	// tracepoints: whole-system sampling and off-CPU time.
	BackendEBPF
)

var backendNames = [...]string{"perf", "ebpf"}

func (b Backend) String() string {
	if int(b) < len(backendNames) {
		return backendNames[b]
	}
	return fmt.Sprintf("Backend(%d)", uint8(b))
}

// ParseBackend returns the back end named s: "perf" or "ebpf".
func ParseBackend(s string) (Backend, error) {
	for i, n := range backendNames {
		if n == s {
			return Backend(i), nil
		}
	}
	return 0, fmt.Errorf("unknown back end %q (want perf or ebpf)", s)
}

// UnwindMode says how a back end turns a sample into a user stack.
type UnwindMode uint8

const (
	// UnwindFP follows frame pointers (on Linux the kernel does it).
	UnwindFP UnwindMode = iota
	// UnwindDWARF samples registers and a copy of the user stack and
	// unwinds them with each module's call frame information.
	UnwindDWARF
	// UnwindAuto decides by the target's executable. One that keeps frame
	// pointers gets the kernel's frame-pointer chain plus registers and a
	// small stack window (512 bytes), from which the CFI row of the
	// sampled PC recovers a caller the chain misses (a function sampled
	// before it links its frame: shrink-wrapped code, leaves, prologues).
	// Any other is sampled like UnwindDWARF, following frame pointers in
	// the modules that keep them and CFI in the others.
	UnwindAuto
)

var unwindNames = [...]string{"fp", "dwarf", "auto"}

func (m UnwindMode) String() string {
	if int(m) < len(unwindNames) {
		return unwindNames[m]
	}
	return fmt.Sprintf("UnwindMode(%d)", uint8(m))
}

// ParseUnwindMode returns the mode named s: "fp", "dwarf" or "auto".
func ParseUnwindMode(s string) (UnwindMode, error) {
	for i, n := range unwindNames {
		if n == s {
			return UnwindMode(i), nil
		}
	}
	return 0, fmt.Errorf("unknown unwind mode %q (want fp, dwarf or auto)", s)
}

// Sample is one raw sample as the back end reports it. PCs is only valid
// during the Handler call.
type Sample struct {
	Time   int64
	Pid    uint32
	Tid    uint32
	CPU    uint32
	Weight uint64
	Flags  format.SampleFlags
	// PCs are absolute addresses, leaf first: kernel frames (if any), then
	// user frames. When Stack is set, PCs holds only the kernel frames.
	PCs []uint64
	// Set instead of the user frames when the back end keeps raw stacks
	// (Config.KeepRaw): the registers in DWARF numbering as
	// arch.Regs.AppendMasked lays them out, and a copy of the stack memory
	// from StackAddr (the stack pointer) up.
	RegMask   uint64
	Regs      []uint64
	StackAddr uint64
	Stack     []byte
	// Chain, with Stack, is the frame-pointer walk of the user stack the
	// kernel made at the sample (its user callchain, leaf first), or nil:
	// the offline unwinder goes on with it where the copy ends
	// (arch.Unwinder.Chain), as across a Go stack switch.
	Chain []uint64
	// Goroutine is the Go goroutine id the thread ran (Config.Goroutines;
	// 0: unknown or not Go); LabelSet its pprof labels' set id (0: none),
	// numbered by the back end from 1; NewLabels, set on the first sample
	// of a set, holds the set's labels.
	Goroutine uint64
	LabelSet  uint64
	NewLabels []format.Label
	// G is the g register at the sample (Config.SampleG; 0: not
	// sampled): in Go code, the address of the running goroutine's g;
	// in other code, whatever the register held.
	G uint64
	// Python holds the thread's Python frames, leaf first (none when
	// Config.NoPython is set or the thread runs no Python code);
	// NewPyCodes the code objects they refer to that no earlier sample
	// did, with ids numbered by the back end from 1.
	Python     []format.PyFrame
	NewPyCodes []format.PyCode
	// PyGIL says whether the thread held its interpreter's GIL when its
	// Python frames were read.
	PyGIL format.PyGIL
	// JIT holds the frames a JIT runtime's reader (V8) named in the
	// thread's native stack, leaf first (none with Config.NoJIT);
	// NewJITFuncs the functions they refer to that no earlier sample
	// did, with ids numbered by the back end from 1.
	JIT         []format.JITFrame
	NewJITFuncs []format.JITFunc
}

// Handler receives a back end's events, in order, from one goroutine.
// Module ids are assigned by the back end and unique within a session.
// Pointers and slices passed in are only valid during the call.
type Handler interface {
	Process(e *format.Process)
	ProcessEnd(e *format.ProcessEnd)
	ThreadStart(e *format.ThreadStart)
	ThreadName(e *format.ThreadName)
	ThreadEnd(e *format.ThreadEnd)
	ModuleLoad(e *format.ModuleLoad)
	ModuleUnload(e *format.ModuleUnload)
	Sample(s *Sample)
	Lost(e *format.Lost)
}

// Stats are a session's running totals.
type Stats struct {
	Samples uint64
	Lost    uint64
	Records uint64 // kernel records read
	Bytes   uint64 // ring-buffer bytes read

	// Back ends that suspend threads to sample them (Windows) report how
	// long each thread stayed suspended: the number of suspensions and
	// the median, 99th percentile and longest window in ns.
	Suspensions                        uint64
	SuspendP50, SuspendP99, SuspendMax int64
	// SuspendTotal is the sum of the suspended windows, in ns.
	SuspendTotal int64
	// IdleSkips counts the thread-ticks at which a thread that used no
	// CPU since its last sample was neither suspended nor sampled.
	IdleSkips uint64

	// AskedHz is the frequency asked for; AchievedHz the on-CPU samples
	// per CPU-second of the sampled threads, which is what Linux's
	// cpu-clock event gives at AskedHz; TickHz the sampling rounds per
	// second the back end managed. Zero where a back end does not
	// measure them (perf and eBPF sample in the kernel at the asked
	// rate).
	AskedHz            int
	AchievedHz, TickHz float64

	// PythonSamples counts the samples given Python frames
	// (Config.NoPython unset), PythonCut the chains cut short by a check
	// (a frame that moved mid-read, the depth cap); PythonWarning names
	// the interpreters found but not read (an unknown version), "" if none.
	PythonSamples, PythonCut uint64
	PythonWarning            string
	// GoSamples counts the samples that carry their goroutine
	// (Config.Goroutines); GoWarning names a Go program whose
	// goroutines were not read (no DWARF, out of process).
	GoSamples uint64
	GoWarning string
	// PythonAtSample counts the samples of PythonSamples whose frames
	// were read at the sample (in BPF, the eBPF back end), not when the
	// recorder drained it.
	PythonAtSample uint64

	// JITSamples counts the samples given frames named from a JIT
	// runtime's own metadata (V8), JITCut the frames such a reader left
	// anonymous because a check failed (memory that moved, a type or
	// layout that did not match); JITWarning names the runtimes found
	// but not read (an unknown version), "" if none.
	JITSamples, JITCut uint64
	JITWarning         string

	// AllocMode says how Config.Alloc samples allocations, "" without
	// it: AllocPreload or AllocUprobes.
	AllocMode string

	// BuildIDCache says what the build-id cache (Config.BuildIDCache)
	// got: files copied from processes' roots and bytes, copies that
	// failed; "" when nothing was copied.
	BuildIDCache string
	// AllocFallback says why a running process was not given the
	// injected sampler, when AllocMode is AllocUprobes for it ("" else).
	AllocFallback string
}
