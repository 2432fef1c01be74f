package format

import "fmt"

// Kind is the type of an event. Its numeric value is the type code written
// to the stream (see SPEC.md §5); codes are never reused.
type Kind uint8

// Event kinds. Code 0 and the codes up to 127 not named here are reserved for
// future versions of this format; 128..255 are free for private extensions.
// Readers skip events of unknown kinds by their length.
const (
	KindInvalid      Kind = 0
	KindProcess      Kind = 1
	KindClockSync    Kind = 2
	KindThreadStart  Kind = 3
	KindThreadName   Kind = 4
	KindThreadEnd    Kind = 5
	KindModuleLoad   Kind = 6
	KindModuleUnload Kind = 7
	KindString       Kind = 8
	KindStack        Kind = 9
	KindSample       Kind = 10
	KindRawStack     Kind = 11
	KindSpanBegin    Kind = 12
	KindSpanEnd      Kind = 13
	KindMarker       Kind = 14
	KindCounter      Kind = 15
	KindLost         Kind = 16
	KindProcessEnd   Kind = 17
	KindLabelSet     Kind = 18  // an interned set of pprof labels (SPEC.md §6.18)
	KindJITCode      Kind = 20  // code a JIT compiler wrote, with its name (SPEC.md §6.20)
	KindJITUnload    Kind = 21  // JIT code that stopped being valid (SPEC.md §6.21)
	KindAlloc        Kind = 22  // sampled allocations, in bytes and objects (SPEC.md §6.22)
	KindFree         Kind = 23  // sampled allocations released (SPEC.md §6.23)
	KindPyCode       Kind = 24  // an interned Python code object (SPEC.md §6.24)
	KindPyStack      Kind = 25  // an interned list of Python (and JIT runtime) frames (SPEC.md §6.25)
	KindJITFunc      Kind = 26  // an interned function of a JIT runtime (SPEC.md §6.26)
	KindUnknown      Kind = 255 // reported by the Reader for codes it does not know
)

var kindNames = [...]string{
	KindInvalid:      "Invalid",
	KindProcess:      "Process",
	KindClockSync:    "ClockSync",
	KindThreadStart:  "ThreadStart",
	KindThreadName:   "ThreadName",
	KindThreadEnd:    "ThreadEnd",
	KindModuleLoad:   "ModuleLoad",
	KindModuleUnload: "ModuleUnload",
	KindString:       "String",
	KindStack:        "Stack",
	KindSample:       "Sample",
	KindRawStack:     "RawStack",
	KindSpanBegin:    "SpanBegin",
	KindSpanEnd:      "SpanEnd",
	KindMarker:       "Marker",
	KindCounter:      "Counter",
	KindLost:         "Lost",
	KindProcessEnd:   "ProcessEnd",
	KindJITCode:      "JITCode",
	KindJITUnload:    "JITUnload",
	KindLabelSet:     "LabelSet",
	KindAlloc:        "Alloc",
	KindFree:         "Free",
	KindPyCode:       "PyCode",
	KindPyStack:      "PyStack",
	KindJITFunc:      "JITFunc",
}

// NumKinds is one more than the highest kind code this version defines.
// Codes below it that have no name (kindNames) are reserved, not defined.
const NumKinds = int(KindJITFunc) + 1

func (k Kind) String() string {
	if int(k) < len(kindNames) && kindNames[k] != "" {
		return kindNames[k]
	}
	if k == KindUnknown {
		return "Unknown"
	}
	return fmt.Sprintf("Kind(%d)", uint8(k))
}

// OS identifies the operating system of the traced process.
type OS uint8

const (
	OSUnknown OS = 0
	OSLinux   OS = 1
	OSWindows OS = 2
	OSDarwin  OS = 3
)

func (o OS) String() string {
	switch o {
	case OSLinux:
		return "linux"
	case OSWindows:
		return "windows"
	case OSDarwin:
		return "darwin"
	}
	return "unknown"
}

// Arch identifies the instruction set of the traced process.
type Arch uint8

const (
	ArchUnknown Arch = 0
	ArchAMD64   Arch = 1
	ArchARM64   Arch = 2
	Arch386     Arch = 3
	ArchARM     Arch = 4
)

func (a Arch) String() string {
	switch a {
	case ArchAMD64:
		return "amd64"
	case ArchARM64:
		return "arm64"
	case Arch386:
		return "386"
	case ArchARM:
		return "arm"
	}
	return "unknown"
}

// Clock identifies the clock all times of a stream are read from.
type Clock uint8

const (
	ClockUnknown   Clock = 0
	ClockMonotonic Clock = 1 // Linux CLOCK_MONOTONIC, ns
	ClockQPC       Clock = 2 // Windows QueryPerformanceCounter, converted to ns
	ClockMachAbs   Clock = 3 // macOS mach_absolute_time, converted to ns
)

func (c Clock) String() string {
	switch c {
	case ClockMonotonic:
		return "monotonic"
	case ClockQPC:
		return "qpc"
	case ClockMachAbs:
		return "mach_absolute_time"
	}
	return "unknown"
}

// Header is the fixed start of every stream.
type Header struct {
	Version     uint16 // format version; this package writes Version1
	BigEndian   bool   // byte order of the target (RawStack bytes, registers as memory)
	PointerSize uint8  // 4 or 8
	OS          OS
	Arch        Arch
	Clock       Clock
}

// ModuleKind says which object format a module is in.
type ModuleKind uint8

const (
	ModuleUnknown ModuleKind = 0
	ModuleELF     ModuleKind = 1
	ModulePE      ModuleKind = 2
	ModuleMachO   ModuleKind = 3
	ModuleJIT     ModuleKind = 4
	ModuleKernel  ModuleKind = 5 // the kernel image or a kernel module
	ModuleVDSO    ModuleKind = 6
	ModuleAnon    ModuleKind = 7 // anonymous executable memory
)

func (k ModuleKind) String() string {
	switch k {
	case ModuleELF:
		return "elf"
	case ModulePE:
		return "pe"
	case ModuleMachO:
		return "macho"
	case ModuleJIT:
		return "jit"
	case ModuleKernel:
		return "kernel"
	case ModuleVDSO:
		return "vdso"
	case ModuleAnon:
		return "anon"
	}
	return "unknown"
}

// Process announces a process. Pid is the OS process id.
type Process struct {
	Time    int64 // ns on the stream clock
	Pid     uint32
	Ppid    uint32
	Name    string // short name (comm on Linux, image name on Windows)
	Cmdline string // the command line, arguments separated by NUL where known
	// Attrs are the process's resource attributes, named as the
	// OpenTelemetry semantic conventions name them (process.executable.path,
	// container.id, k8s.pod.uid, service.name, host.name, host.id), as the
	// recorder found them; optional (SPEC §6.1), nil when none.
	Attrs []Label
}

// ProcessEnd says a process exited.
type ProcessEnd struct {
	Time     int64
	Pid      uint32
	ExitCode int64
}

// ClockSync pairs the stream clock with the wall clock.
type ClockSync struct {
	Time     int64 // ns on the stream clock
	WallNano int64 // ns since the Unix epoch, UTC
}

// ThreadStart announces a thread.
type ThreadStart struct {
	Time int64
	Pid  uint32
	Tid  uint32
}

// ThreadName names (or renames) a thread.
type ThreadName struct {
	Time int64
	Pid  uint32
	Tid  uint32
	Name string
}

// ThreadEnd says a thread exited.
type ThreadEnd struct {
	Time int64
	Pid  uint32
	Tid  uint32
}

// ModuleLoad says a module (executable image, shared library, JIT region,
// kernel) is mapped at [Base, Base+Size) in process Pid from time Time on.
// ID is the stream-unique module id that ModuleUnload refers to.
type ModuleLoad struct {
	Time       int64
	Pid        uint32
	ID         uint64
	Base       uint64 // address of the first mapped byte
	Size       uint64
	FileOffset uint64 // offset in Path of the byte mapped at Base (ELF); 0 for PE images mapped whole
	Kind       ModuleKind
	Path       string
	// BuildID is the GNU build id (ELF .note.gnu.build-id) or the Mach-O
	// LC_UUID, raw bytes.
	BuildID []byte
	// GoBuildID is the Go toolchain build id ("xxxx/yyyy/..."), if any.
	GoBuildID string
	// PDB identity of a PE image from its CodeView RSDS record.
	PDBGUID [16]byte // GUID as stored in the file (little-endian fields)
	PDBAge  uint32
	PDBPath string
	// Code identity of a PE image.
	TimeDateStamp uint32
	SizeOfImage   uint32
}

// HasPDB reports whether m carries a PDB identity.
func (m *ModuleLoad) HasPDB() bool {
	return m.PDBAge != 0 || m.PDBGUID != [16]byte{} || m.PDBPath != ""
}

// ModuleUnload says module ID is no longer mapped.
type ModuleUnload struct {
	Time int64
	Pid  uint32
	ID   uint64
}

// String defines interned string ID. IDs start at 1; 0 means "no string".
type String struct {
	ID    uint64
	Value string
}

// Stack defines interned stack ID as a list of absolute addresses, leaf
// first. IDs start at 1; 0 means "no stack". The first PC is the
// interrupted instruction; the others are return addresses.
type Stack struct {
	ID  uint64
	PCs []uint64
}

// SampleFlags qualifies a Sample.
type SampleFlags uint8

const (
	SampleOffCPU    SampleFlags = 1 << 0 // the thread was not running (weight is ns blocked)
	SampleKernel    SampleFlags = 1 << 1 // the leaf frame is in the kernel
	SampleTruncated SampleFlags = 1 << 2 // the stack was cut short (depth limit, unwinding stopped)
)

// SpanLink names an OpenTelemetry span: its trace id and span id, as
// go.opentelemetry.io/otel/trace and the OTLP data model hold them.
type SpanLink struct {
	TraceID [16]byte
	SpanID  [8]byte
}

// IsZero reports whether l names no span.
func (l SpanLink) IsZero() bool { return l == SpanLink{} }

// Sample is one observation of a thread: its stack at Time.
type Sample struct {
	Time   int64
	Pid    uint32
	Tid    uint32
	CPU    uint32 // CPU number; NoCPU if unknown
	Weight uint64 // ns of CPU (on-CPU) or ns waited (off-CPU); 1 for a sample that stands for no time (SPEC §6.10)
	Stack  uint64 // interned Stack id; 0 = no stack
	Flags  SampleFlags
	// Goroutine is the Go goroutine id the thread was running, 0 if
	// unknown or not Go (SPEC.md §6.10, appended in 1.1).
	Goroutine uint64
	// Labels is the interned LabelSet of the goroutine's pprof labels, 0
	// for none.
	Labels uint64
	// Python is the interned PyStack of the thread's Python frames, 0 for
	// none (SPEC.md §6.10, appended with PyStack).
	Python uint64
	// Link is the OpenTelemetry span the thread was in (a tracer span
	// opened with one), zero if none (SPEC.md §6.10, optional).
	Link SpanLink
}

// LabelSet is an interned set of key/value labels (a goroutine's pprof
// labels), referred to by Sample.Labels.
type LabelSet struct {
	ID     uint64
	Labels []Label
}

// Label is one key/value pair of a LabelSet.
type Label struct {
	Key, Value string
}

// NoCPU is the CPU field of a Sample whose CPU is not known.
const NoCPU = ^uint32(0)

// RawStack is a sample whose stack has not been unwound: the registers of
// the thread and a copy of the stack memory starting at StackAddr (normally
// the stack pointer). The register set is per arch; bit i of RegMask set
// means Regs holds register i of the arch's numbering (DWARF numbering for
// amd64 and arm64, see SPEC.md §6.11), in ascending order.
type RawStack struct {
	Time      int64
	Pid       uint32
	Tid       uint32
	CPU       uint32
	Weight    uint64 // as Sample.Weight
	Flags     SampleFlags
	RegMask   uint64
	Regs      []uint64
	StackAddr uint64
	Data      []byte
	// Kernel is an interned Stack of kernel frames above the user frames, or 0.
	Kernel uint64
	// Python is the interned PyStack of the thread's Python frames, 0 for
	// none (SPEC.md §6.11, appended with PyStack).
	Python uint64
	// Chain is an interned Stack holding the frame-pointer walk of the
	// user stack made at the sample (the kernel's user callchain), 0 for
	// none: an unwinder goes on with it where the stack copy ends
	// (SPEC.md §6.11, appended after Python).
	Chain uint64
}

// SpanBegin opens span ID on thread Tid. Name is an interned String id.
type SpanBegin struct {
	Time   int64
	Tid    uint32
	ID     uint64
	Parent uint64 // enclosing span, 0 if none
	Name   uint64 // String id
	Stack  uint64 // Stack id of the begin site, or 0
	// Goroutine is the Go goroutine that opened the span, 0 if unknown
	// or not Go; GoStart the Stack id of one frame, the function the
	// goroutine started with (0: unknown). Link is the OpenTelemetry
	// span the span is linked to, zero if none. (SPEC.md §6.12,
	// optional.)
	Goroutine uint64
	GoStart   uint64
	Link      SpanLink
}

// SpanEnd closes span ID.
type SpanEnd struct {
	Time int64
	Tid  uint32
	ID   uint64
}

// Marker is an instant event with a name and an optional stack.
type Marker struct {
	Time      int64
	Tid       uint32
	Name      uint64 // String id
	Stack     uint64 // Stack id, or 0
	Goroutine uint64 // the Go goroutine that recorded it, 0 if unknown (SPEC.md §6.14, optional)
}

// Counter records the value of counter Name at Time.
type Counter struct {
	Time  int64
	Name  uint64 // String id
	Value float64
}

// LostReason says why data was dropped.
type LostReason uint8

const (
	LostUnknown      LostReason = 0
	LostRingOverflow LostReason = 1 // the kernel ring buffer was full
	LostBackpressure LostReason = 2 // a stream could not keep up and events were dropped
	LostUnwind       LostReason = 3 // samples dropped because their stack could not be captured
	LostThrottled    LostReason = 4 // the kernel throttled sampling
	LostStreamError  LostReason = 5 // a stream failed; events after the failure went nowhere
)

func (r LostReason) String() string {
	switch r {
	case LostRingOverflow:
		return "ring-overflow"
	case LostBackpressure:
		return "backpressure"
	case LostUnwind:
		return "unwind"
	case LostThrottled:
		return "throttled"
	case LostStreamError:
		return "stream-error"
	}
	return "unknown"
}

// Lost says Count events (usually samples) were dropped between the previous
// event and Time.
type Lost struct {
	Time   int64
	Pid    uint32 // 0 if not tied to a process
	Count  uint64
	Reason LostReason
}

// Event is one decoded event. Kind says which field is valid. A Reader
// reuses its Event (and the slices and strings within it may share the
// Reader's buffers for byte slices): copy what you keep past the next call
// to [Reader.Next].
type Event struct {
	Kind Kind
	// Code is the raw type code; it differs from Kind when Kind is KindUnknown.
	Code uint8
	// Offset is the byte offset of the event's type code in the stream.
	Offset int64

	Process      Process
	ProcessEnd   ProcessEnd
	ClockSync    ClockSync
	ThreadStart  ThreadStart
	ThreadName   ThreadName
	ThreadEnd    ThreadEnd
	ModuleLoad   ModuleLoad
	ModuleUnload ModuleUnload
	String       String
	Stack        Stack
	Sample       Sample
	RawStack     RawStack
	SpanBegin    SpanBegin
	SpanEnd      SpanEnd
	Marker       Marker
	Counter      Counter
	Lost         Lost
	JITCode      JITCode
	JITUnload    JITUnload
	LabelSet     LabelSet
	Alloc        Alloc
	Free         Free
	PyCode       PyCode
	PyStack      PyStack
	JITFunc      JITFunc
	// Unknown holds the body of an event of unknown kind.
	Unknown []byte
}

// Time returns the event's time, and false for events that carry none
// (String, Stack, unknown).
func (e *Event) Time() (int64, bool) {
	switch e.Kind {
	case KindProcess:
		return e.Process.Time, true
	case KindProcessEnd:
		return e.ProcessEnd.Time, true
	case KindClockSync:
		return e.ClockSync.Time, true
	case KindThreadStart:
		return e.ThreadStart.Time, true
	case KindThreadName:
		return e.ThreadName.Time, true
	case KindThreadEnd:
		return e.ThreadEnd.Time, true
	case KindModuleLoad:
		return e.ModuleLoad.Time, true
	case KindModuleUnload:
		return e.ModuleUnload.Time, true
	case KindSample:
		return e.Sample.Time, true
	case KindRawStack:
		return e.RawStack.Time, true
	case KindSpanBegin:
		return e.SpanBegin.Time, true
	case KindSpanEnd:
		return e.SpanEnd.Time, true
	case KindMarker:
		return e.Marker.Time, true
	case KindCounter:
		return e.Counter.Time, true
	case KindLost:
		return e.Lost.Time, true
	case KindJITCode:
		return e.JITCode.Time, true
	case KindJITUnload:
		return e.JITUnload.Time, true
	case KindAlloc:
		return e.Alloc.Time, true
	case KindFree:
		return e.Free.Time, true
	}
	return 0, false
}
