// Package snapshot captures the stacks of every thread of a process at one
// moment: of a live process (rawstack snapshot -p PID) or of an ELF core
// dump (rawstack snapshot --core FILE).
//
// For a live Linux process, [Process] seizes each thread with ptrace
// (PTRACE_SEIZE + PTRACE_INTERRUPT, so the target is never left stopped and
// no SIGSTOP is sent), reads its registers, reads stack memory with
// process_vm_readv through a small page cache, unwinds with the arch
// package (DWARF CFI from each module's .eh_frame, frame pointers where no
// table covers a pc) and detaches, on every path. [Core] does the same from
// a core file: registers from NT_PRSTATUS notes, memory from the core's
// PT_LOAD segments and, where the core omitted them, from the files its
// NT_FILE note names.
//
// Unwind tables are read lazily: module files are mapped, not read, and
// for a library with the usual .eh_frame_hdr search table the unwinder
// parses the FDE of each pc it meets the first time it meets it (libc has
// thousands; a snapshot needs a few dozen), so a cold snapshot costs little
// more than a warm one. A [TableCache] shared between snapshots keeps what
// was parsed (and the mappings).
//
// A snapshot holds absolute addresses and modules; it does not symbolize.
// [Snapshot.Write] turns it into an event stream.
//
//	snap, err := snapshot.Process(pid, nil)
//	if err != nil { ... }
//	for _, t := range snap.Threads {
//		fmt.Println(t.Tid, t.PCs)
//	}
//
// The core-file reader is pure computation and works on every OS; Process
// returns an error wrapping platform.ErrNotSupported off Linux.
package snapshot

import (
	"encoding/binary"
	"sort"
	"time"

	"github.com/rawstack/rawstack/arch"
	"github.com/rawstack/rawstack/format"
)

// Snapshot is the stacks of all threads of one process.
type Snapshot struct {
	Pid     int
	Name    string // comm
	Cmdline string // arguments separated by NUL where known
	Arch    arch.Arch
	// Time is CLOCK_MONOTONIC in ns when the threads were stopped (0 for a
	// core file).
	Time    int64
	Threads []Thread
	// Modules are the executable file-backed mappings (and the vDSO),
	// sorted by Start.
	Modules []Module
	// Stopped is how long the threads of a live process were stopped:
	// from the first interrupt to the last detach.
	Stopped time.Duration
	// OS is the target's OS; the zero value means Linux. Windows
	// snapshots (minidumps, live Windows processes) have PE modules and
	// QPC times.
	OS format.OS
	// PyCodes are the code objects the threads' Python frames refer to
	// (Options.Python), ids from 1.
	PyCodes []format.PyCode
	// JITFuncs are the functions the threads' JIT frames refer to
	// (Options.JIT), ids from 1.
	JITFuncs []format.JITFunc
	// JITErrors say why a runtime the process maps was found but its
	// frames not named (Options.JIT: an unknown V8 or HotSpot version, a
	// stripped libjvm), one a file; its frames stay native.
	JITErrors []error
}

// Thread is one thread's stack.
type Thread struct {
	Tid  int
	Name string
	Regs arch.Regs
	// PCs are absolute addresses, leaf first: the pc, then each caller's
	// return address (symbolize those at pc-1).
	PCs []uint64
	// Stop says why the unwind ended.
	Stop arch.Stop
	// Err is set when the thread's registers could not be read; PCs is
	// then empty.
	Err error
	// Python holds the thread's Python frames, leaf first, read while it
	// was stopped (Options.Python; a live CPython 3.8–3.13 process).
	Python []format.PyFrame
	// GIL says whether the thread held its interpreter's GIL, or was
	// blocked taking it (its stack in take_gil), while stopped.
	GIL format.PyGIL
	// JIT holds the frames V8's metadata or HotSpot's tables named in the
	// thread's native stack (Options.JIT; a live Node.js process or JVM),
	// leaf first, each tied to its native frame by address
	// (format.JITFrame). For a JVM, PCs is the stack HotSpot's walk found
	// where the native unwind stopped at compiled Java code.
	JIT []format.JITFrame
}

// Module is one executable mapping of an ELF file (or the vDSO).
type Module struct {
	Start, End uint64 // [Start, End) in the target
	Offset     uint64 // file offset mapped at Start
	Path       string // as the target names it
	// File is the file that was opened for unwind tables and build id
	// ("" if none could be): the target's file through /proc/PID/root for
	// a live process, the file named in a core (or the --exe override).
	File string
	// Bias is the load bias: runtime address minus link-time address.
	// Valid when HaveBias.
	Bias     uint64
	HaveBias bool
	Kind     format.ModuleKind
	BuildID  []byte
	// HasCFI says the module's .eh_frame or .debug_frame was parsed.
	HasCFI bool
	// PE identity (Kind ModulePE): CodeView RSDS and code id.
	PDBGUID       [16]byte
	PDBAge        uint32
	PDBPath       string
	TimeDateStamp uint32
	SizeOfImage   uint32
}

// Module returns the module holding addr, or nil.
func (s *Snapshot) Module(addr uint64) *Module {
	i := sort.Search(len(s.Modules), func(i int) bool { return s.Modules[i].End > addr })
	if i < len(s.Modules) && s.Modules[i].Start <= addr {
		return &s.Modules[i]
	}
	return nil
}

// Options tune Process and Core. The zero value (or nil) is fine.
type Options struct {
	// MaxFrames caps the frames of one stack; 0 means 512.
	MaxFrames int
	// Tables caches parsed unwind tables between snapshots; nil parses
	// every module afresh.
	Tables *TableCache
	// Exe (cores) is the main executable, used where the core names a path
	// that does not exist here.
	Exe string
	// Root (cores) is prepended to the paths a core names (a sysroot).
	Root string
	// Python reads each thread's Python frames in a live CPython process
	// (package platform/linux/cpython), while the threads are stopped, or
	// in a core of one, from the memory the core holds.
	Python bool
	// JIT names each thread's JavaScript frames in a live Node.js process
	// from V8's metadata (package platform/linux/v8), and its Java frames
	// in a live JVM from HotSpot's serviceability tables (package
	// platform/linux/hotspot), while the threads are stopped, or in a
	// core of one (x86-64 for Java), from the memory the core holds.
	JIT bool
	// NoThreadNames (live processes) leaves Thread.Name empty: reading
	// each thread's comm from /proc costs a file open per thread, which
	// a caller that prints no names need not pay.
	NoThreadNames bool
	// WhileReleasing (live processes), if set, is called with the
	// snapshot, its stacks unwound, on another goroutine while the
	// threads are being detached; Process returns once both are done.
	// Work that needs only the stacks (naming their frames) then
	// overlaps the detaching. It must not read Thread.Name or
	// Snapshot.Stopped, which are being set meanwhile.
	WhileReleasing func(*Snapshot)
}

func (o *Options) maxFrames() int {
	if o == nil || o.MaxFrames <= 0 {
		return 512
	}
	return o.MaxFrames
}

func (o *Options) tables() *TableCache {
	if o == nil || o.Tables == nil {
		return NewTableCache()
	}
	return o.Tables
}

// Write writes s to w as a self-contained event stream fragment: Process,
// ThreadStart and ThreadName per thread, ModuleLoad per module (ids 1..n),
// one Stack per distinct stack (ids 1..n) and one Sample per thread with a
// stack. A sample whose unwind did not reach the outermost frame is
// flagged truncated.
func (s *Snapshot) Write(w *format.Writer) error {
	pid := uint32(s.Pid)
	w.WriteProcess(format.Process{Time: s.Time, Pid: pid, Name: s.Name, Cmdline: s.Cmdline})
	for _, t := range s.Threads {
		w.WriteThreadStart(format.ThreadStart{Time: s.Time, Pid: pid, Tid: uint32(t.Tid)})
		if t.Name != "" {
			w.WriteThreadName(format.ThreadName{Time: s.Time, Pid: pid, Tid: uint32(t.Tid), Name: t.Name})
		}
	}
	for i := range s.Modules {
		m := &s.Modules[i]
		w.WriteModuleLoad(&format.ModuleLoad{
			Time: s.Time, Pid: pid, ID: uint64(i + 1),
			Base: m.Start, Size: m.End - m.Start, FileOffset: m.Offset,
			Kind: m.Kind, Path: m.Path, BuildID: m.BuildID,
			PDBGUID: m.PDBGUID, PDBAge: m.PDBAge, PDBPath: m.PDBPath,
			TimeDateStamp: m.TimeDateStamp, SizeOfImage: m.SizeOfImage,
		})
	}
	for i := range s.PyCodes {
		w.WritePyCode(&s.PyCodes[i])
	}
	for i := range s.JITFuncs {
		w.WriteJITFunc(&s.JITFuncs[i])
	}
	pyIDs := map[string]uint64{}
	var pyKey []byte
	// Threads parked in the same place share one interned Stack.
	ids := map[string]uint64{}
	var key []byte
	for _, t := range s.Threads {
		if len(t.PCs) == 0 {
			continue
		}
		key = key[:0]
		for _, pc := range t.PCs {
			key = binary.LittleEndian.AppendUint64(key, pc)
		}
		stack, ok := ids[string(key)]
		if !ok {
			stack = uint64(len(ids) + 1)
			ids[string(key)] = stack
			w.WriteStack(stack, t.PCs)
		}
		var flags format.SampleFlags
		if t.Stop != arch.StopOutermost {
			flags |= format.SampleTruncated
		}
		var py uint64
		if len(t.Python) > 0 || t.GIL != format.PyGILNone || len(t.JIT) > 0 {
			pyKey = binary.AppendUvarint(append(pyKey[:0], byte(t.GIL)), uint64(len(t.Python)))
			for _, f := range t.Python {
				pyKey = binary.AppendUvarint(binary.AppendUvarint(pyKey, f.Code), uint64(f.Offset)<<1|uint64(btou(f.Entry)))
			}
			for _, f := range t.JIT {
				pyKey = binary.AppendUvarint(binary.AppendUvarint(binary.AppendUvarint(pyKey, f.PC), f.Func), uint64(f.Line)<<4|uint64(f.Tier)<<1|uint64(btou(f.Inlined)))
			}
			if py = pyIDs[string(pyKey)]; py == 0 {
				py = uint64(len(pyIDs) + 1)
				pyIDs[string(pyKey)] = py
				w.WriteFrames(py, t.Python, t.GIL, t.JIT)
			}
		}
		w.WriteSample(format.Sample{Time: s.Time, Pid: pid, Tid: uint32(t.Tid), CPU: format.NoCPU, Weight: 1, Stack: stack, Flags: flags, Python: py})
	}
	return w.Err()
}

func btou(b bool) uint8 {
	if b {
		return 1
	}
	return 0
}

// Header returns the stream header for a snapshot of s.
func (s *Snapshot) Header() format.Header {
	if s.OS == format.OSWindows {
		return format.Header{Version: format.Version1, PointerSize: 8, OS: format.OSWindows, Arch: format.Arch(s.Arch), Clock: format.ClockQPC}
	}
	return format.Header{Version: format.Version1, PointerSize: 8, OS: format.OSLinux, Arch: format.Arch(s.Arch), Clock: format.ClockMonotonic}
}
