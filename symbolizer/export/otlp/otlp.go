// Package otlp exports rawstack streams as OpenTelemetry profiles (OTLP,
// the profiles signal of the OpenTelemetry protocol), built on the
// Collector's own data model, go.opentelemetry.io/collector/pdata/pprofile.
//
// A [Builder] reads the events of a stream — from a file, or live as a
// tracer stream — and turns the samples it has seen since the last
// [Builder.Flush] into a [pprofile.Profiles]:
//
//   - one ResourceProfiles per process, with the semantic-convention
//     resource attributes process.pid, process.parent_pid,
//     process.executable.name, process.command_args, host.name, os.type
//     and host.arch, and those the recorder found
//     (process.executable.path, container.id, k8s.pod.uid, service.name,
//     host.id: format.Process.Attrs);
//   - a "cpu"/"nanoseconds" profile of on-CPU samples (period type
//     "cpu"/"nanoseconds", the mean weight) and, when there are off-CPU
//     samples, an "off_cpu"/"nanoseconds" profile: each Sample is one
//     (stack, thread) with one timestamp per observation and one value
//     per timestamp, the sample's weight (format/SPEC.md §6.10: ns of CPU,
//     ns blocked), and the attributes thread.id and thread.name. A stream
//     whose on-CPU samples all weigh 1 (counts, not time) gets a
//     "samples"/"count" profile with timestamps only, as the OpenTelemetry
//     eBPF profiler writes; a sample taken in a tracer span linked to an
//     OpenTelemetry span (format.Sample.Link) points at that trace and span
//     in the link table;
//   - for allocation samples (format/SPEC.md §6.22), the four profiles of
//     a Go heap profile: "alloc_objects"/"count" and "alloc_space"/"bytes"
//     of the batch's allocations, "inuse_objects"/"count" and
//     "inuse_space"/"bytes" of what the sampled ones hold at its end;
//   - mappings with the attributes process.executable.build_id.gnu,
//     process.executable.build_id.go and, for every file found at its
//     recorded path when the batch is built, process.executable.build_id.htlhash
//     ([HTLHash]), the names the OpenTelemetry profiler and semantic
//     conventions use, so a backend or the rawstack
//     Collector processor can find the debug files by build id; PE
//     (Windows) mappings carry rawstack.pdb.guid_age, rawstack.pdb.path
//     and rawstack.pe.code_id instead (see [AttrPDBGUIDAge]), what symbol
//     servers index PDBs and images by;
//   - locations with the attribute profile.frame.type ("native" or
//     "kernel") and, unless [Options.Raw], one line per function at the
//     address, innermost inlined function first (the pprof convention).
//     Raw profiles name kernel frames still, from /proc/kallsyms, when
//     built on the recording host (see [Options.RawKernel]);
//   - the frames the stream's own events name, raw or not, as every other
//     output has them (symbolizer.RuntimeFrames): JIT code from perf maps
//     and jitdump files ("v8js", "jvm", "dotnet" or "cpython" by the
//     process's runtime, "jit" when it is not known), the frames V8's or
//     HotSpot's own metadata names ("v8js", "jvm"; a compiled frame's
//     inlined functions are its lines) and Python frames ("cpython", at
//     the interpreter's evaluation frames; the address is the
//     instruction's offset in its code object), each with its function,
//     file and line. A Collector cannot name them: a process's perf map
//     and its interpreter's memory exist only on its host.
//
// Every table of the dictionary holds each entry once and only entries
// something refers to, profiles cover their samples' times in the
// half-open [time, time + duration), and so on: what is written passes
// the OTLP profiles conformance rules (the profiling SIG's profcheck;
// internal/otlpcheck).
//
// A location's address is absolute, inside its mapping's [memory_start,
// memory_limit). For every frame but the leaf it is the return address
// minus one — an address inside the call instruction — so that a
// symbolizer that sees the location alone names the call site. Raw
// profiles carry no names of user code: only addresses, mappings and
// build ids (and the kernel's names, from the host's kallsyms).
//
// [Write] encodes a Profiles as the protobuf ExportProfilesServiceRequest
// that an OTLP receiver accepts; [Exporter] streams batches to a Collector
// over gRPC.
package otlp

import (
	"crypto/rand"
	"encoding/binary"
	"errors"
	"io"
	"sort"
	"strings"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/pprofile"

	"github.com/rawstack/rawstack/format"
	"github.com/rawstack/rawstack/symbolizer"
	_ "github.com/rawstack/rawstack/symbolizer/sources" // the resolver it makes when given none names every kind of module
)

// Attribute names (OpenTelemetry semantic conventions and the
// OpenTelemetry eBPF profiler).
const (
	AttrBuildIDGNU     = "process.executable.build_id.gnu"
	AttrBuildIDGo      = "process.executable.build_id.go"
	AttrFrameType      = "profile.frame.type"
	AttrThreadID       = "thread.id"
	AttrThreadName     = "thread.name"
	AttrPID            = "process.pid"
	AttrParentPID      = "process.parent_pid"
	AttrExecutableName = "process.executable.name"
	AttrCommandArgs    = "process.command_args"
	AttrHostName       = "host.name"
	AttrOSType         = "os.type"
	AttrHostArch       = "host.arch"
	AttrServiceName    = "service.name"
)

// Attributes of PE (Windows) mappings. Neither the semantic conventions
// nor the OpenTelemetry eBPF profiler (Linux only) define any for PE
// images or their PDBs, so rawstack defines its own, in its namespace,
// carrying what symbol servers index the files by:
//
//   - rawstack.pdb.guid_age: the PDB's GUID and age as a symbol server's
//     key (the GUID's fields in upper-case hex, then the age in hex:
//     "9CFFF3223893E0D74C4C44205044422E1"), from the image's CodeView
//     record;
//   - rawstack.pdb.path: the PDB path the linker wrote into the image;
//   - rawstack.pe.code_id: the image's TimeDateStamp (8 upper-case hex
//     digits) then SizeOfImage (lower-case hex), the key symbol servers
//     index images by.
const (
	AttrPDBGUIDAge = "rawstack.pdb.guid_age"
	AttrPDBPath    = "rawstack.pdb.path"
	AttrPECodeID   = "rawstack.pe.code_id"
)

// Frame types of profile.frame.type.
const (
	FrameNative = "native"
	FrameKernel = "kernel"
)

// ScopeName is the instrumentation scope of the profiles rawstack writes.
const ScopeName = "github.com/rawstack/rawstack"

// Options tune a [Builder].
type Options struct {
	// Raw leaves locations unsymbolized: address and mapping only.
	Raw bool
	// Resolver symbolizes locations when Raw is false; nil means a
	// Resolver with the zero symbolizer.Options, created on first use.
	Resolver *symbolizer.Resolver
	// HostName is written as host.name on every resource; "" leaves it out.
	HostName string
	// ServiceName, if set, is written as service.name on every resource.
	ServiceName string
	// RawKernel leaves kernel frames unnamed in Raw profiles too. By
	// default a Raw profile still names them where the Builder runs on
	// the recording host (the running kernel's build id is the recorded
	// one, and /proc/kallsyms is readable): a kernel's symbol table with
	// its KASLR addresses exists only on that host, so the OpenTelemetry
	// profiler names kernel frames there as well.
	RawKernel bool
	// MaxStacks, if set, is the writer's stack table cap
	// (tracer.Options.MaxStacks): a stack defined more than MaxStacks
	// definitions ago is never referenced again, and Flush forgets it, so
	// that a long stream does not grow with the stacks it has seen.
	MaxStacks int
	// NoFileHash leaves out process.executable.build_id.htlhash, which
	// is computed from the files at their recorded paths: set it when
	// converting a trace on another machine than the one that recorded
	// it, whose files at those paths may be other builds (files whose GNU
	// build id or PE code id differ are skipped either way).
	NoFileHash bool
}

// Builder turns stream events into OTLP profiles. It is not safe for
// concurrent use.
type Builder struct {
	opts    Options
	hdr     format.Header
	db      *symbolizer.ModuleDB
	stacks  map[uint64][]uint64
	procs   map[uint32]format.Process
	threads map[uint32]string

	clock     format.ClockSync
	haveClock bool

	pending []pendingSample
	// threads and processes that ended: forgotten after the next Flush,
	// which may still need their names, so a long stream with thread
	// churn does not grow.
	// (sets: a thread that starts looks itself up in them, and a host's
	// worth of threads end between two flushes)
	endedThreads map[uint32]struct{}
	endedProcs   map[uint32]struct{}
	// a Flush that keeps samples back keeps their processes too
	keptProcs  map[uint32]struct{}
	forgetPids []uint32 // forget's scratch
	// counters since creation
	samples, lost, rawStacks, unknownStacks int64
	// weighted: an on-CPU sample of the stream weighed other than 1, so
	// on-CPU weights are nanoseconds, not counts (format/SPEC.md §6.10).
	weighted bool
	lostBy   map[format.LostReason]int64
	maxStack uint64 // the largest stack id defined
	// htlhash of each module's file, "" when not available
	hashes map[*symbolizer.Module]string
	// and by GNU build id, for the same file in other processes
	idHashes map[string]string
	mem      memState // allocations and frees (memory.go)
	// rf names the frames the stream's own events name: JIT code,
	// Python frames, JIT runtime frames (frames.go)
	rf symbolizer.RuntimeFrames
}

type pendingSample struct {
	time   int64
	pid    uint32
	tid    uint32
	weight uint64
	stack  uint64
	python uint64 // PyStack id, 0 none
	off    bool
	held   bool // kept back by a Flush, for JIT code not named yet
	link   format.SpanLink
}

// NewBuilder returns a Builder for a stream with header h.
func NewBuilder(h format.Header, opts Options) *Builder {
	return &Builder{
		opts:    opts,
		hdr:     h,
		db:      symbolizer.NewModuleDB(),
		stacks:  map[uint64][]uint64{},
		procs:   map[uint32]format.Process{},
		threads: map[uint32]string{},
	}
}

// Event takes one event of the stream. It copies what it keeps.
func (b *Builder) Event(ev *format.Event) {
	switch ev.Kind {
	case format.KindProcess:
		b.procs[ev.Process.Pid] = ev.Process
		delete(b.endedProcs, ev.Process.Pid)
	case format.KindClockSync:
		b.clock, b.haveClock = ev.ClockSync, true
	case format.KindThreadName:
		b.threads[ev.ThreadName.Tid] = ev.ThreadName.Name
		delete(b.endedThreads, ev.ThreadName.Tid) // a reused tid
	case format.KindThreadEnd:
		if b.endedThreads == nil {
			b.endedThreads = map[uint32]struct{}{}
		}
		b.endedThreads[ev.ThreadEnd.Tid] = struct{}{}
	case format.KindProcessEnd:
		if b.endedProcs == nil {
			b.endedProcs = map[uint32]struct{}{}
		}
		b.endedProcs[ev.ProcessEnd.Pid] = struct{}{}
	case format.KindModuleLoad:
		b.db.Load(&ev.ModuleLoad)
	case format.KindModuleUnload:
		b.db.Unload(&ev.ModuleUnload)
	case format.KindStack:
		b.stacks[ev.Stack.ID] = append([]uint64(nil), ev.Stack.PCs...)
		b.maxStack = max(b.maxStack, ev.Stack.ID)
	case format.KindLost:
		b.lost += int64(ev.Lost.Count)
		if b.lostBy == nil {
			b.lostBy = map[format.LostReason]int64{}
		}
		b.lostBy[ev.Lost.Reason] += int64(ev.Lost.Count)
	case format.KindRawStack:
		b.rawStacks++
	case format.KindSample:
		s := &ev.Sample
		b.samples++
		b.pending = append(b.pending, pendingSample{time: s.Time, pid: s.Pid, tid: s.Tid, weight: s.Weight, stack: s.Stack, python: s.Python, off: s.Flags&format.SampleOffCPU != 0, link: s.Link})
		if s.Flags&format.SampleOffCPU == 0 && s.Weight != 1 {
			b.weighted = true
		}
	case format.KindAlloc, format.KindFree:
		b.memEvent(ev)
	case format.KindString, format.KindJITCode, format.KindJITUnload, format.KindPyCode, format.KindPyStack, format.KindJITFunc:
		b.rf.Event(ev)
	}
}

// Counts are a Builder's running totals.
type Counts struct {
	// Samples is the number of Sample events taken.
	Samples int64
	// Lost sums the Lost events of the stream.
	Lost int64
	// RawStacks counts RawStack events, which are not exported:
	// they need offline unwinding (record without --keep-raw).
	RawStacks int64
	// UnknownStacks counts samples whose stack was never defined.
	UnknownStacks int64
	// Pending is the number of samples not flushed yet.
	Pending int
}

// Counts returns the running totals.
func (b *Builder) Counts() Counts {
	return Counts{Samples: b.samples, Lost: b.lost, RawStacks: b.rawStacks, UnknownStacks: b.unknownStacks, Pending: len(b.pending)}
}

// Flush returns the profiles of the samples taken since the last Flush,
// and their number (memory events counted as samples). A sample whose
// stack holds an address that only JIT code can name, and that no JIT
// code the stream has published so far names, waits for one more Flush:
// runtimes publish code in perf maps, which the recorder reads every
// 100 ms (and, on a whole host, from a process's first sample on), so its
// name may arrive after the sample. Call [Builder.FlushAll] at the end of
// the stream.
func (b *Builder) Flush() (pprofile.Profiles, int) { return b.flush(false) }

// FlushAll is Flush that keeps no sample back: the end of a stream.
func (b *Builder) FlushAll() (pprofile.Profiles, int) { return b.flush(true) }

func (b *Builder) flush(all bool) (pprofile.Profiles, int) {
	out := pprofile.NewProfiles()
	var held []pendingSample
	if !all {
		held = b.holdBack()
	}
	n := len(b.pending) + b.mem.events
	if n == 0 {
		b.pending = append(b.pending[:0], held...)
		b.forget()
		return out, 0
	}
	d := newDict(out.Dictionary())
	d.fileHash = b.fileHash
	byPid := map[uint32][]pendingSample{}
	var pids []uint32
	for _, s := range b.pending {
		if _, ok := byPid[s.pid]; !ok {
			pids = append(pids, s.pid)
		}
		byPid[s.pid] = append(byPid[s.pid], s)
	}
	for pid := range b.mem.touched {
		if _, ok := byPid[pid]; !ok {
			pids = append(pids, pid)
			byPid[pid] = nil
		}
	}
	sort.Slice(pids, func(i, j int) bool { return pids[i] < pids[j] })
	for _, pid := range pids {
		rp := out.ResourceProfiles().AppendEmpty()
		b.resource(rp.Resource().Attributes(), pid)
		sp := rp.ScopeProfiles().AppendEmpty()
		sp.Scope().SetName(ScopeName)
		var on, off []pendingSample
		for _, s := range byPid[pid] {
			if s.off {
				off = append(off, s)
			} else {
				on = append(on, s)
			}
		}
		if len(on) > 0 {
			b.profile(d, sp.Profiles().AppendEmpty(), on, false)
		}
		if len(off) > 0 {
			b.profile(d, sp.Profiles().AppendEmpty(), off, true)
		}
		b.memProfiles(d, sp, pid)
	}
	b.pending = append(b.pending[:0], held...)
	b.mem.flushed()
	b.forget()
	return out, n
}

// forget drops the names of threads and processes that ended.
// Samples kept back for the next Flush (b.pending) keep what they need.
func (b *Builder) forget() {
	var keepTids, keepStacks map[uint64]bool
	if len(b.pending) > 0 {
		keepTids, keepStacks = map[uint64]bool{}, map[uint64]bool{}
		for _, s := range b.pending {
			keepTids[uint64(s.tid)], keepStacks[s.stack] = true, true
		}
	}
	for tid := range b.endedThreads {
		if !keepTids[uint64(tid)] {
			delete(b.threads, tid)
			delete(b.endedThreads, tid)
		}
	}
	b.forgetPids = b.forgetPids[:0]
	for pid := range b.endedProcs {
		b.forgetPids = append(b.forgetPids, pid)
		delete(b.procs, pid)
	}
	// Stacks the writer no longer references (Options.MaxStacks).
	if n := uint64(b.opts.MaxStacks); n > 0 && len(b.stacks) > b.opts.MaxStacks && b.maxStack > n {
		for id := range b.stacks {
			if id <= b.maxStack-n && !keepStacks[id] {
				delete(b.stacks, id)
			}
		}
	}
	// Their modules too: a whole-host stream sees processes come and go
	// for as long as it runs.
	for _, m := range b.db.Forget(b.forgetPids) {
		delete(b.hashes, m)
	}
	b.rf.Forget(b.forgetPids)
	if len(b.endedThreads) == 0 {
		b.endedThreads = nil // maps keep their size when cleared
	}
	b.endedProcs = nil
}

// holdBack takes out of b.pending the samples that wait for the next
// Flush: those whose stacks hold an address in anonymous executable
// memory, where JIT code lives, that no code published so far names. A sample waits once; a process that ended has published all it
// will (the recorder reads its perf map once more at its exit).
func (b *Builder) holdBack() []pendingSample {
	var held []pendingSample
	keep := b.pending[:0]
	for _, s := range b.pending {
		if _, ended := b.endedProcs[s.pid]; !s.held && !ended && b.unnamedJIT(&s) {
			s.held = true
			held = append(held, s)
			continue
		}
		keep = append(keep, s)
	}
	b.pending = keep
	return held
}

func (b *Builder) unnamedJIT(s *pendingSample) bool {
	for i, pc := range b.stacks[s.stack] {
		pc = callAddr(i, pc)
		m := b.db.Lookup(s.pid, pc, s.time)
		if m == nil || fileBacked(m) {
			continue // named from a file, or no code: not JIT code
		}
		if _, ok := b.rf.JITCode(s.pid, pc, s.time); !ok {
			return true
		}
	}
	return false
}

func (b *Builder) wall(t int64) uint64 {
	if !b.haveClock {
		return uint64(t)
	}
	return uint64(t - b.clock.Time + b.clock.WallNano)
}

func (b *Builder) resource(attrs pcommon.Map, pid uint32) {
	attrs.PutInt(AttrPID, int64(pid))
	if p, ok := b.procs[pid]; ok {
		if p.Ppid != 0 {
			attrs.PutInt(AttrParentPID, int64(p.Ppid))
		}
		if p.Name != "" {
			attrs.PutStr(AttrExecutableName, p.Name)
		}
		if p.Cmdline != "" {
			args := attrs.PutEmptySlice(AttrCommandArgs)
			for _, a := range strings.Split(strings.TrimRight(p.Cmdline, "\x00"), "\x00") {
				args.AppendEmpty().SetStr(a)
			}
		}
	}
	if b.opts.HostName != "" {
		attrs.PutStr(AttrHostName, b.opts.HostName)
	}
	if b.opts.ServiceName != "" {
		attrs.PutStr(AttrServiceName, b.opts.ServiceName)
	}
	// What the recorder found about the process (format SPEC §6.1):
	// process.executable.path, container.id, k8s.pod.uid, service.name,
	// host.name, host.id. The recording host's names win over the
	// converting one's, the process's own service name over the default.
	for _, a := range b.procs[pid].Attrs {
		if a.Value != "" {
			attrs.PutStr(a.Key, a.Value)
		}
	}
	switch b.hdr.OS {
	case format.OSLinux:
		attrs.PutStr(AttrOSType, "linux")
	case format.OSWindows:
		attrs.PutStr(AttrOSType, "windows")
	case format.OSDarwin:
		attrs.PutStr(AttrOSType, "darwin")
	}
	switch b.hdr.Arch {
	case format.ArchAMD64:
		attrs.PutStr(AttrHostArch, "amd64")
	case format.ArchARM64:
		attrs.PutStr(AttrHostArch, "arm64")
	}
}

type sampleKey struct {
	stack int32
	tid   uint32
	link  format.SpanLink
}

func (b *Builder) profile(d *dict, pr pprofile.Profile, samples []pendingSample, off bool) {
	// Weights are nanoseconds (format/SPEC.md §6.10), one value per
	// timestamp; on-CPU weights that are all 1 so far in the stream are
	// counts (an older Windows recording, a snapshot): no values then.
	values := off || b.weighted
	switch {
	case off:
		pr.SampleType().SetTypeStrindex(d.str("off_cpu"))
		pr.SampleType().SetUnitStrindex(d.str("nanoseconds"))
	case values:
		pr.SampleType().SetTypeStrindex(d.str("cpu"))
		pr.SampleType().SetUnitStrindex(d.str("nanoseconds"))
		pr.PeriodType().SetTypeStrindex(d.str("cpu"))
		pr.PeriodType().SetUnitStrindex(d.str("nanoseconds"))
		var sum uint64
		for _, s := range samples {
			sum += s.weight
		}
		pr.SetPeriod(int64(sum / uint64(len(samples))))
	default:
		pr.SampleType().SetTypeStrindex(d.str("samples"))
		pr.SampleType().SetUnitStrindex(d.str("count"))
	}
	var id pprofile.ProfileID
	rand.Read(id[:])
	pr.SetProfileID(id)
	first, last := samples[0].time, samples[0].time
	agg := map[sampleKey]pprofile.Sample{}
	for _, s := range samples {
		first, last = min(first, s.time), max(last, s.time)
		st := b.stack(d, &s)
		k := sampleKey{st, s.tid, s.link}
		ps, ok := agg[k]
		if !ok {
			ps = pr.Samples().AppendEmpty()
			ps.SetStackIndex(st)
			if !s.link.IsZero() {
				ps.SetLinkIndex(d.link(s.link))
			}
			ps.AttributeIndices().Append(d.intAttr(AttrThreadID, int64(s.tid)))
			if name := b.threads[s.tid]; name != "" {
				ps.AttributeIndices().Append(d.strAttr(AttrThreadName, name))
			}
			agg[k] = ps
		}
		ps.TimestampsUnixNano().Append(b.wall(s.time))
		if values {
			ps.Values().Append(int64(s.weight))
		}
	}
	setRange(pr, b.wall(first), b.wall(last))
}

// setRange sets a profile's time range to cover first..last, both
// included: the range is half-open, [time, time + duration), so it ends
// one nanosecond after the last sample.
func setRange(pr pprofile.Profile, first, last uint64) {
	pr.SetTime(pcommon.Timestamp(first))
	pr.SetDurationNano(last - first + 1)
}

// resolver returns Options.Resolver, or one made on first use: with the
// zero symbolizer.Options, or in Raw mode (kernel frames only) one that
// asks no debuginfod server.
func (b *Builder) resolver() *symbolizer.Resolver {
	if b.opts.Resolver == nil {
		var o *symbolizer.Options
		if b.opts.Raw {
			// Raw profiles name kernel frames and find CPython's
			// evaluation loop (isEval): symbol tables are enough, where
			// a binary's DWARF cost the agent tens of MiB.
			o = &symbolizer.Options{NoDebuginfod: true, SymbolsOnly: true}
		}
		b.opts.Resolver = symbolizer.NewResolver(o, 0, 0)
	}
	return b.opts.Resolver
}

// AppendLines adds one line per frame to loc, innermost first, naming
// functions through fn (which returns a function table index for a name
// and file, given str for string indices). Frames without a function name
// are skipped.
func AppendLines(dict pprofile.ProfilesDictionary, loc pprofile.Location, frames []symbolizer.Frame, str func(string) int32, fn func(name, file string) int32) {
	for _, f := range frames {
		if f.Function == "" {
			continue
		}
		l := loc.Lines().AppendEmpty()
		l.SetFunctionIndex(fn(f.Function, f.File))
		l.SetLine(int64(f.Line))
		l.SetColumn(int64(f.Column))
	}
}

// dict interns the dictionary tables of one Profiles. Index 0 of every
// table is the empty entry, as the OTLP profiles data model asks.
type dict struct {
	d     pprofile.ProfilesDictionary
	strs  map[string]int32
	attrs map[attrKey]int32
	maps  map[*symbolizer.Module]int32
	// mapping content → index
	mapContent map[string]int32
	locs       map[locKey]int32
	evals      map[locKey]bool  // native addresses in CPython's evaluation loop
	content    map[string]int32 // location content → index
	funcs      map[[2]string]int32
	stacks     map[string]int32
	links      map[format.SpanLink]int32
	// fileHash returns a module's htlhash, "" if unknown; nil for none
	fileHash func(*symbolizer.Module) string
	keyBuf   []byte
	attrBuf  []int32
	locBuf   []int32
	natBuf   []symbolizer.NativeFrame
	locKey   []byte
	fnBuf    []int32
}

type attrKey struct {
	key   string
	sval  string
	ival  int64
	isInt bool
}

func newDict(d pprofile.ProfilesDictionary) *dict {
	x := &dict{d: d, strs: map[string]int32{}, attrs: map[attrKey]int32{}, maps: map[*symbolizer.Module]int32{}, mapContent: map[string]int32{},
		locs: map[locKey]int32{}, evals: map[locKey]bool{}, content: map[string]int32{}, funcs: map[[2]string]int32{}, stacks: map[string]int32{}, links: map[format.SpanLink]int32{}}
	x.str("")
	d.AttributeTable().AppendEmpty()
	d.MappingTable().AppendEmpty()
	d.LocationTable().AppendEmpty()
	d.FunctionTable().AppendEmpty()
	d.StackTable().AppendEmpty()
	d.LinkTable().AppendEmpty()
	x.stacks[""] = 0
	return x
}

func (x *dict) str(s string) int32 {
	if i, ok := x.strs[s]; ok {
		return i
	}
	i := int32(x.d.StringTable().Len())
	x.d.StringTable().Append(s)
	x.strs[s] = i
	return i
}

func (x *dict) strAttr(key, val string) int32 {
	k := attrKey{key: key, sval: val}
	if i, ok := x.attrs[k]; ok {
		return i
	}
	i := int32(x.d.AttributeTable().Len())
	a := x.d.AttributeTable().AppendEmpty()
	a.SetKeyStrindex(x.str(key))
	a.Value().SetStr(val)
	x.attrs[k] = i
	return i
}

func (x *dict) intAttr(key string, val int64) int32 {
	k := attrKey{key: key, ival: val, isInt: true}
	if i, ok := x.attrs[k]; ok {
		return i
	}
	i := int32(x.d.AttributeTable().Len())
	a := x.d.AttributeTable().AppendEmpty()
	a.SetKeyStrindex(x.str(key))
	a.Value().SetInt(val)
	x.attrs[k] = i
	return i
}

// link returns the link table index of an OpenTelemetry span.
func (x *dict) link(l format.SpanLink) int32 {
	if i, ok := x.links[l]; ok {
		return i
	}
	i := int32(x.d.LinkTable().Len())
	pl := x.d.LinkTable().AppendEmpty()
	pl.SetTraceID(pcommon.TraceID(l.TraceID))
	pl.SetSpanID(pcommon.SpanID(l.SpanID))
	x.links[l] = i
	return i
}

func (x *dict) function(name, file string) int32 {
	k := [2]string{name, file}
	if i, ok := x.funcs[k]; ok {
		return i
	}
	i := int32(x.d.FunctionTable().Len())
	f := x.d.FunctionTable().AppendEmpty()
	f.SetNameStrindex(x.str(name))
	f.SetSystemNameStrindex(x.str(name))
	f.SetFilenameStrindex(x.str(file))
	x.funcs[k] = i
	return i
}

// mapping returns the mapping table index of module m. Modules of the
// same file at the same place in several processes share one mapping.
// A module of no extent (its end unknown) gets a mapping of range 0-0:
// a mapping's range is [memory_start, memory_limit) with start < limit,
// or both 0.
func (x *dict) mapping(m *symbolizer.Module) int32 {
	if i, ok := x.maps[m]; ok {
		return i
	}
	attrs := x.attrBuf[:0]
	if len(m.BuildID) > 0 {
		attrs = append(attrs, x.strAttr(AttrBuildIDGNU, m.BuildIDHex()))
	}
	if m.GoBuildID != "" {
		attrs = append(attrs, x.strAttr(AttrBuildIDGo, m.GoBuildID))
	}
	if x.fileHash != nil {
		if h := x.fileHash(m); h != "" {
			attrs = append(attrs, x.strAttr(AttrBuildIDHTLHash, h))
		}
	}
	if m.Kind == format.ModulePE {
		if m.PDBGUID != [16]byte{} {
			attrs = append(attrs, x.strAttr(AttrPDBGUIDAge, PDBGUIDAge(m.PDBGUID, m.PDBAge)))
		}
		if m.PDBPath != "" {
			attrs = append(attrs, x.strAttr(AttrPDBPath, m.PDBPath))
		}
		if m.TimeDateStamp != 0 || m.SizeOfImage != 0 {
			attrs = append(attrs, x.strAttr(AttrPECodeID, PECodeID(m.TimeDateStamp, m.SizeOfImage)))
		}
	}
	x.attrBuf = attrs
	start, limit := m.Base, m.Base+m.Size
	if limit <= start {
		start, limit = 0, 0
	}
	name := x.str(m.Name())
	key := binary.AppendUvarint(x.keyBuf[:0], start)
	key = binary.AppendUvarint(key, limit)
	key = binary.AppendUvarint(key, m.FileOffset)
	key = binary.AppendUvarint(key, uint64(name))
	for _, a := range attrs {
		key = binary.AppendUvarint(key, uint64(a))
	}
	x.keyBuf = key
	if i, ok := x.mapContent[string(key)]; ok {
		x.maps[m] = i
		return i
	}
	i := int32(x.d.MappingTable().Len())
	pm := x.d.MappingTable().AppendEmpty()
	pm.SetMemoryStart(start)
	pm.SetMemoryLimit(limit)
	pm.SetFileOffset(m.FileOffset)
	pm.SetFilenameStrindex(name)
	pm.AttributeIndices().FromRaw(attrs)
	x.mapContent[string(key)] = i
	x.maps[m] = i
	return i
}

// Write encodes p as a protobuf ExportProfilesServiceRequest to w.
func Write(w io.Writer, p pprofile.Profiles) error {
	b, err := Marshal(p)
	if err != nil {
		return err
	}
	_, err = w.Write(b)
	return err
}

// ErrRawStacks says a stream holds RawStack events, which this exporter
// does not unwind: record without --keep-raw.
var ErrRawStacks = errors.New("otlp: the trace holds raw stack copies (--keep-raw), which are not exported; record without --keep-raw")

// Convert reads a whole stream and returns its profiles. Damaged chunks
// are skipped and passed to warn (if not nil).
func Convert(r *format.Reader, opts Options, warn func(error)) (pprofile.Profiles, Counts, error) {
	b := NewBuilder(r.Header(), opts)
	for {
		ev, err := r.Next()
		if err == io.EOF {
			break
		}
		var ce *format.ChunkError
		if errors.As(err, &ce) {
			if warn != nil {
				warn(err)
			}
			continue
		}
		if err != nil {
			return pprofile.Profiles{}, b.Counts(), err
		}
		b.Event(ev)
	}
	c := b.Counts()
	p, _ := b.FlushAll()
	if c.RawStacks > 0 && warn != nil {
		warn(ErrRawStacks)
	}
	return p, c, nil
}
