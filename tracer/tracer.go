// Package tracer is rawstack's embedding API: it samples the stacks of a
// process — the caller itself, a running PID or a command it launches —
// and streams raw events (threads, modules with build ids, interned stacks,
// samples) in the rawstack format to any number of io.Writers. Nothing is
// symbolized here; the symbolizer does that offline.
//
//	f, _ := os.Create("self.rawstack")
//	t, err := tracer.Start(ctx, tracer.Options{Frequency: 499, Streams: []io.Writer{f}})
//	if err != nil { ... }
//	defer t.Stop()
//	... work ...
//	t.Capture("checkpoint") // this goroutine's stack, now
//
// Streams added later with [Tracer.AddStream] first receive a snapshot of
// the current state, so each stream is readable on its own. A slow or
// failing stream never blocks the traced program: its chunks are dropped
// and it receives a Lost event with the count when it catches up.
package tracer

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"reflect"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rawstack/rawstack/format"
	"github.com/rawstack/rawstack/platform"
)

// Options configures [Start]. The zero value profiles the calling process
// at 99 Hz. The sampling options reach the back end of the running OS as
// one platform.Config; a back end that does not implement an option set
// here refuses it: Start returns a *platform.OptionError naming the field
// (errors.Is(err, platform.ErrNotSupported)) instead of ignoring it.
type Options struct {
	// Frequency is the sampling rate per thread in Hz; 0 means 99.
	Frequency int
	// Pid attaches to a running process; 0 means the calling process
	// (unless Command is set).
	Pid int
	// Command, if set, is started (it must not have been started) and
	// recorded from its first instruction. Do not call its Wait method:
	// use [Tracer.Wait].
	Command *exec.Cmd
	// Streams receive the trace from the start.
	Streams []io.Writer
	// NoKernel leaves out kernel frames even where they are permitted.
	NoKernel bool
	// StreamQueue is the number of chunks queued per stream before chunks
	// are dropped; 0 means 256.
	StreamQueue int
	// FlushInterval bounds how long events wait before they are written;
	// 0 means 200 ms. With the back end reading its buffers at least every
	// 50 ms, a recorder killed outright (SIGKILL, OOM) loses at most the
	// last 250 ms of the trace.
	FlushInterval time.Duration
	// ChunkSize is the format chunk payload size; 0 means the format's default.
	ChunkSize int
	// MaxStacks caps the distinct stacks the tracer holds to intern them
	// (and 32 PCs a stack on average); when a new stack would pass it, the
	// table starts afresh and ids go on, so an id older than the last
	// MaxStacks defined is never referenced again. 0 means 256 Ki stacks
	// and 1 Mi PCs (about 24 MiB). A long whole-host recording (rawstack
	// agent) sets it low to keep its memory flat, at the cost of defining
	// stacks still in use again.
	MaxStacks int
	// Unwind selects how user stacks are captured: UnwindFP (the default;
	// the kernel follows frame pointers), UnwindDWARF (registers and a
	// copy of the stack, unwound with the modules' CFI in the tracer's
	// reading goroutine) or UnwindAuto (a program whose executable keeps
	// frame pointers gets the kernel's chain with its leaf repaired from
	// the sampled PC's CFI row and a 512-byte stack window; any other is
	// sampled as in UnwindDWARF, with frame pointers in the modules that
	// keep them; a module keeps them when at least a tenth of its CFI rows
	// compute the frame address from the frame pointer, so Go binaries,
	// whose CFI counts from the stack pointer, get CFI). Samples the reader is too late to unwind are dropped and
	// reported as Lost (LostUnwind).
	Unwind UnwindMode
	// StackSize is the user stack copied per sample in the DWARF modes,
	// in bytes; 0 means 8192.
	StackSize int
	// KeepRaw, in the DWARF modes, writes RawStack events (registers and
	// stack copy) instead of unwinding on the host; the symbolizer unwinds
	// them offline.
	KeepRaw bool
	// Backend selects the sampling mechanism: BackendPerf (the default,
	// perf_event ring buffers) or BackendEBPF (BPF programs; needs
	// CAP_BPF and CAP_PERFMON, or root, and the program must import
	// github.com/rawstack/rawstack/platform/linux/ebpf). The eBPF back end
	// unwinds user stacks with CFI unless Unwind is UnwindFP.
	Backend Backend
	// System, with BackendEBPF, samples every process of the host; Pid
	// and Command must not be set.
	System bool
	// OffCPU, with BackendEBPF on Linux or on Windows, also records
	// off-CPU time: a sample
	// flagged format.SampleOffCPU, weighted by the nanoseconds a thread
	// waited, each time it comes back on CPU.
	OffCPU bool
	// Goroutines records, on each sample of Go code, the goroutine id and
	// its pprof labels (runtime/pprof.Do, SetGoroutineLabels): the
	// sampled g register (R14 on amd64, X28 on arm64) locates the g, whose
	// fields are read at offsets from the executable's DWARF. A Go binary
	// without DWARF, or a sample in non-Go code, records goroutine 0.
	// In frame-pointer mode it adds two user registers to each kernel
	// record (24 bytes); the DWARF modes sample them already. RawStack
	// events (KeepRaw) carry no goroutine.
	Goroutines bool
	// NoPython turns off reading the Python frames of CPython threads
	// (platform.Config.NoPython; on by default on Linux).
	NoPython bool
	// BuildIDCache, BuildIDCacheMax and NoBuildIDCache set the build-id
	// cache the recorder fills with the files of modules of other mount
	// namespaces (containers) while they live (platform.Config's fields
	// of the same names; on by default, in the user cache directory).
	BuildIDCache    string
	BuildIDCacheMax int64
	NoBuildIDCache  bool
	// NoJIT turns off recording the code JIT runtimes publish in perf
	// maps and jitdump files (node --perf-basic-prof or --perf-prof, the
	// JVM's -XX:+DumpPerfMapAtExit, python -X perf); by default their
	// contents are copied into the trace as JITCode events.
	NoJIT bool
	// JITCodeBytes also copies the machine code of each jitdump code load.
	JITCodeBytes bool
	// Heap records the Go heap of the calling process beside its CPU:
	// the runtime's heap profile (runtime.MemProfile, sampled at
	// runtime.MemProfileRate, 512 KiB by default), read every
	// HeapInterval and at Stop, becomes Alloc and Free events
	// (format/SPEC.md §6.22) of each allocation site's stack, unbiased
	// as runtime/pprof does, from which the symbolizer derives
	// alloc_space, alloc_objects, inuse_space and inuse_objects of the
	// allocations made while recording (heap.go says how in-use is
	// attributed). Start and Stop each run a garbage collection, so the
	// profile's bounds are exact (the runtime publishes it after a
	// collection). A stream added with AddStream gets the allocations
	// from when it joined. Pid, Command and System must not be set.
	Heap bool
	// HeapInterval is how often Heap reads the profile; 0 means 1 s.
	HeapInterval time.Duration
	// Alloc, on Linux, records the target's native heap allocations:
	// the allocation sampler (package platform/linux/allocshim),
	// preloaded into a Command or injected into a running Pid, takes
	// the C allocator's entries (malloc, calloc, realloc, free,
	// posix_memalign, aligned_alloc, memalign, valloc, pvalloc, C++'s
	// operator new and delete) and passes them to the allocator the
	// program would have called (glibc's, jemalloc's, tcmalloc's),
	// sampled by bytes (one sample per AllocRate bytes on average, a
	// Poisson process, so an allocation of s bytes is sampled with
	// probability 1-exp(-s/AllocRate)), written as Alloc events with
	// the allocation's stack, unwound as CPU samples are and ending at
	// the allocator's entry, and unbiased weights; the sampled blocks'
	// frees as Free events. With BackendEBPF, uprobes on the allocator
	// serve where the sampler cannot be injected, and for System; with
	// BackendPerf such a process is an error saying why. A statically
	// linked command is refused with an error naming its binary.
	Alloc bool
	// AllocRate is Alloc's mean sampling interval in bytes; 0 means
	// 512 KiB.
	AllocRate int
}

// Backend selects the sampling mechanism; see [Options.Backend].
type Backend = platform.Backend

// Back ends.
const (
	BackendPerf = platform.BackendPerf
	BackendEBPF = platform.BackendEBPF
)

// UnwindMode says how user stacks are captured; see [Options.Unwind].
type UnwindMode = platform.UnwindMode

// Unwind modes.
const (
	UnwindFP    = platform.UnwindFP
	UnwindDWARF = platform.UnwindDWARF
	UnwindAuto  = platform.UnwindAuto
)

// ErrNotSelf is returned by [Tracer.Capture] when the tracer samples
// another process.
var ErrNotSelf = errors.New("tracer: Capture needs a tracer of the calling process")

// ErrStopped is returned by calls on a stopped tracer.
var ErrStopped = errors.New("tracer: stopped")

// Stats are a tracer's running totals.
type Stats struct {
	Pid       int
	Event     string // perf event sampled, e.g. "cpu-clock"
	Samples   uint64
	Lost      uint64 // samples the kernel dropped (ring overflow)
	Dropped   uint64 // samples dropped by slow streams, over all streams
	Threads   int    // threads seen
	Processes int    // processes seen
	Modules   int    // modules seen
	Stacks    int    // distinct stacks
	// Span API records (span begins and ends, markers, counters) dropped:
	// SpansLost when a ring was full as the tracer stopped (also written
	// as a Lost event while the stream is open), SpansDropped in chunks
	// that slow streams dropped, over all streams. A full ring otherwise
	// never drops (see [Tracer.Span]).
	SpansLost, SpansDropped uint64
	// Back ends that suspend threads to sample them (Windows): how many
	// times a thread was suspended, and how long it stayed suspended
	// (median, 99th percentile, longest).
	Suspensions                        uint64
	SuspendP50, SuspendP99, SuspendMax time.Duration
	SuspendTotal                       time.Duration // all windows, summed
	// IdleSkips counts thread-ticks at which a thread that used no CPU
	// since its last sample was neither suspended nor sampled (Windows).
	IdleSkips uint64
	// AskedHz is the frequency asked for. Where the back end measures it
	// (Windows), AchievedHz is the on-CPU samples per CPU-second — what
	// Linux's cpu-clock gives at AskedHz — and TickHz the sampling rounds
	// per second it managed; both are 0 elsewhere.
	AskedHz            int
	AchievedHz, TickHz float64
	// PythonSamples counts the samples that carry Python frames,
	// PythonCut the Python chains cut short by a check (counted, never
	// filled in); PythonWarning names interpreters found but not read.
	PythonSamples, PythonCut uint64
	PythonWarning            string
	// GoSamples counts the samples that carry their goroutine
	// (Options.Goroutines); GoWarning names a Go program whose
	// goroutines were not read: out of process, goroutines and labels
	// are read at offsets from the executable's DWARF, which a binary
	// built -ldflags=-w (or stripped) lacks. Stacks and symbols need
	// none (the Go symbol table stays); the own process needs none.
	GoSamples uint64
	GoWarning string
	// PythonAtSample counts those of PythonSamples read at the sample
	// (in BPF) rather than when the recorder drained it.
	PythonAtSample uint64
	// JITSamples counts the samples given frames named from a JIT
	// runtime's own metadata (V8), JITCut the frames left anonymous by
	// a check; JITWarning names the runtimes found but not read.
	JITSamples, JITCut uint64
	JITWarning         string
	// AllocMode says how Options.Alloc samples allocations ("" without
	// it): platform.AllocPreloadRing for a launched command, into which
	// the sampler is preloaded (platform.AllocPreload with BackendEBPF
	// and UnwindFP); platform.AllocInjectRing for a running process,
	// into which it is injected (platform.AllocInject with BackendEBPF
	// and UnwindFP, or in another pid namespace), or, where it cannot
	// be, platform.AllocUprobes, with the reason in AllocFallback.
	AllocMode     string
	AllocFallback string
	// BuildIDCache says what the build-id cache got (files of other
	// mount namespaces' modules copied), "" when nothing.
	BuildIDCache string
}

// backend is what a per-OS back end provides.
type backend interface {
	Run(ctx context.Context) error
	Close() error
	Stats() platform.Stats
	Pid() int
	Event() string
	ExitErr() error
}

// Tracer records one target. Its methods are safe for concurrent use.
type Tracer struct {
	opts Options
	be   backend
	self bool

	cancel  context.CancelFunc
	done    chan struct{} // closed when the back end stopped
	runErr  error
	stopped atomic.Bool
	stopMu  sync.Mutex
	stopErr error
	flushQ  chan struct{}

	mu      sync.Mutex
	w       *format.Writer
	sink    sink
	streams []*stream
	hdr     format.Header
	start   format.ClockSync
	stacks  *stackTable
	strings map[string]uint64
	strList []string
	// labelSets are the goroutine label sets written so far, by id-1
	// (the back end numbers them from 1), replayed on hot join.
	labelSets [][]format.Label
	python    pyTable // Python code objects and stacks written so far
	procs     map[uint32]format.Process
	threads   map[uint32]threadState
	modules   map[uint64]format.ModuleLoad
	jit       map[jitKey]format.JITCode // live JIT code, for snapshots
	jitLines  []format.JITLine
	inChunk   uint64 // samples in the chunk being built
	final     bool   // stopping: deliver chunks even if a stream is slow
	closed    bool
	nThreads  int
	nProcs    int
	nModules  int
	dropped   uint64

	sp    spanState     // spans, markers, counters (span.go)
	heap  *heapRecorder // Options.Heap (heap.go)
	links linkState     // spans linked to OpenTelemetry spans (spanlink.go)
	// span records in the chunk being built, and in chunks a slow
	// stream dropped
	inChunkSpans, spansDropped uint64
}

type threadState struct {
	pid  uint32
	name string
}

// sink receives the master writer's chunks and fans them out.
type sink struct{ t *Tracer }

func (s sink) Write(p []byte) (int, error) {
	s.t.fanout(p)
	return len(p), nil
}

// DefaultFlushInterval is Options.FlushInterval's default: what a killed
// recorder can lose, less the back end's 50 ms read interval.
const DefaultFlushInterval = 200 * time.Millisecond

// Start begins recording according to opts. Recording stops when ctx is
// done, [Tracer.Stop] is called, or the target exits.
func Start(ctx context.Context, opts Options) (*Tracer, error) {
	if opts.Command != nil && opts.Pid != 0 {
		return nil, errors.New("tracer: set Pid or Command, not both")
	}
	if opts.System && (opts.Command != nil || opts.Pid != 0) {
		return nil, errors.New("tracer: System samples every process: do not set Pid or Command")
	}
	if opts.Heap && (opts.Command != nil || opts.Pid != 0 || opts.System) {
		return nil, errors.New("tracer: Heap records the calling process's Go heap: do not set Pid, Command or System")
	}
	t, err := newTracer(opts)
	if err != nil {
		return nil, err
	}
	h := (*handler)(t)
	t.be, err = openBackend(t.opts.config(), t.opts.Command, h)
	if err != nil {
		t.closeStreams()
		return nil, err
	}
	runCtx, cancel := context.WithCancel(ctx)
	t.cancel = cancel
	go func() {
		t.runErr = t.be.Run(runCtx)
		close(t.done)
	}()
	go t.flusher()
	t.startSpans()
	if opts.Heap {
		t.startHeap()
	}
	return t, nil
}

// newTracer sets up encoding and the streams, without a back end.
func newTracer(opts Options) (*Tracer, error) {
	if opts.StreamQueue <= 0 {
		opts.StreamQueue = 256
	}
	if opts.FlushInterval <= 0 {
		opts.FlushInterval = DefaultFlushInterval
	}
	t := &Tracer{
		opts:    opts,
		self:    opts.Pid == 0 && opts.Command == nil && !opts.System,
		done:    make(chan struct{}),
		flushQ:  make(chan struct{}),
		stacks:  newStackTable(opts.MaxStacks),
		strings: map[string]uint64{},
		procs:   map[uint32]format.Process{},
		threads: map[uint32]threadState{},
		modules: map[uint64]format.ModuleLoad{},
		hdr:     header(),
	}
	t.sink = sink{t}
	var err error
	t.w, err = format.NewWriter(t.sink, t.hdr, &format.WriterOptions{ChunkSize: opts.ChunkSize})
	if err != nil {
		return nil, err
	}
	for _, w := range opts.Streams {
		t.streams = append(t.streams, newStream(w, opts.StreamQueue))
	}
	for _, s := range t.streams {
		s.offer(format.AppendHeader(copyChunk(nil), t.hdr))
	}
	t.start = format.ClockSync{Time: monotonic(), WallNano: time.Now().UnixNano()}
	t.w.WriteClockSync(t.start)
	return t, nil
}

func header() format.Header {
	h := format.Header{PointerSize: 8, OS: hostOS, Clock: hostClock}
	switch runtime.GOARCH {
	case "amd64":
		h.Arch = format.ArchAMD64
	case "arm64":
		h.Arch = format.ArchARM64
	case "386":
		h.Arch, h.PointerSize = format.Arch386, 4
	case "arm":
		h.Arch, h.PointerSize = format.ArchARM, 4
	}
	return h
}

func (t *Tracer) flusher() {
	tk := time.NewTicker(t.opts.FlushInterval)
	defer tk.Stop()
	for {
		select {
		case <-tk.C:
			t.mu.Lock()
			if !t.closed {
				t.w.Flush()
			}
			t.mu.Unlock()
		case <-t.flushQ:
			return
		}
	}
}

// Done is closed when recording has ended: the target exited, ctx was
// done or Stop was called.
func (t *Tracer) Done() <-chan struct{} { return t.done }

// Pid returns the target's process id.
func (t *Tracer) Pid() int { return t.be.Pid() }

// Wait waits until the target exits (or ctx is done), stops the tracer and
// returns the launched command's exit error, or Stop's error.
func (t *Tracer) Wait() error {
	<-t.done
	if err := t.Stop(); err != nil {
		return err
	}
	return t.be.ExitErr()
}

// Stop ends recording, writes the last events to every stream and waits
// until they are written (so a writer that never returns blocks Stop; the
// traced program itself is never blocked by a stream). It returns the
// first error of the back end or of a stream. Calling Stop again returns
// the same error. A launched command keeps running after Stop.
func (t *Tracer) Stop() error {
	t.stopMu.Lock()
	defer t.stopMu.Unlock()
	if t.stopped.Load() {
		return t.stopErr
	}
	t.stopped.Store(true)
	t.cancel()
	<-t.done
	t.be.Close()
	close(t.flushQ)
	t.stopSpans()
	t.stopHeap()
	t.mu.Lock()
	// The last chunk and the last Lost counts are delivered even to slow
	// streams: Stop waits for the writes anyway.
	t.final = true
	t.w.Flush()
	for _, s := range t.streams {
		if s.resync && s.dropped > 0 {
			s.ch <- t.lostChunk(s.dropped)
			s.dropped = 0
		}
	}
	t.closed = true
	t.mu.Unlock()
	t.closeStreams()
	err := t.runErr
	for _, s := range t.streams {
		if err == nil && s.err != nil {
			err = fmt.Errorf("tracer: writing stream: %w", s.err)
		}
	}
	t.stopErr = err
	return err
}

func (t *Tracer) closeStreams() {
	for _, s := range t.streams {
		close(s.ch)
	}
	for _, s := range t.streams {
		<-s.done
	}
}

// Stats returns the running totals.
func (t *Tracer) Stats() Stats {
	if t.be == nil { // the span API alone (tests)
		t.mu.Lock()
		defer t.mu.Unlock()
		return Stats{SpansLost: t.sp.spansLost(), SpansDropped: t.spansDropped}
	}
	bs := t.be.Stats()
	t.mu.Lock()
	defer t.mu.Unlock()
	return Stats{
		Pid:       t.be.Pid(),
		Event:     t.be.Event(),
		Samples:   bs.Samples,
		Lost:      bs.Lost,
		Dropped:   t.dropped,
		Threads:   t.nThreads,
		Processes: t.nProcs,
		Modules:   t.nModules,
		Stacks:    t.stacks.len(),

		SpansLost:    t.sp.spansLost(),
		SpansDropped: t.spansDropped,

		Suspensions: bs.Suspensions,
		SuspendP50:  time.Duration(bs.SuspendP50),
		SuspendP99:  time.Duration(bs.SuspendP99),
		SuspendMax:  time.Duration(bs.SuspendMax),

		SuspendTotal: time.Duration(bs.SuspendTotal),
		IdleSkips:    bs.IdleSkips,
		AskedHz:      bs.AskedHz,
		AchievedHz:   bs.AchievedHz,
		TickHz:       bs.TickHz,

		PythonSamples:  bs.PythonSamples,
		PythonCut:      bs.PythonCut,
		PythonWarning:  bs.PythonWarning,
		GoSamples:      bs.GoSamples,
		GoWarning:      bs.GoWarning,
		PythonAtSample: bs.PythonAtSample,
		JITSamples:     bs.JITSamples,
		JITCut:         bs.JITCut,
		JITWarning:     bs.JITWarning,
		AllocMode:      bs.AllocMode,
		BuildIDCache:   bs.BuildIDCache,
		AllocFallback:  bs.AllocFallback,
	}
}

// AddStream adds an output while recording. It first receives the stream
// header and a snapshot — processes, a clock sync, live threads and
// modules, and every interned string and stack — then live events.
func (t *Tracer) AddStream(w io.Writer) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed || t.stopped.Load() {
		return ErrStopped
	}
	t.w.Flush() // the new stream starts at a chunk boundary
	s := newStream(w, t.opts.StreamQueue)
	s.offer(t.snapshot(true))
	t.streams = append(t.streams, s)
	return nil
}

// RemoveStream detaches w, added by Start or AddStream: it receives the
// events recorded so far, then no more. RemoveStream waits until they are
// written and returns w's write error, if any. The stream it leaves is
// complete and readable.
func (t *Tracer) RemoveStream(w io.Writer) error {
	t.mu.Lock()
	var s *stream
	for i, x := range t.streams {
		if sameWriter(x.w, w) {
			s = x
			if !t.closed {
				t.w.Flush()
				t.streams = append(t.streams[:i:i], t.streams[i+1:]...)
			}
			break
		}
	}
	closed := t.closed
	if s != nil && !closed {
		if s.resync && s.dropped > 0 {
			s.ch <- t.lostChunk(s.dropped)
		}
		close(s.ch)
	}
	t.mu.Unlock()
	if s == nil {
		return errors.New("tracer: RemoveStream: not a stream of this tracer")
	}
	<-s.done
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

// sameWriter compares writers without panicking on uncomparable types.
func sameWriter(a, b io.Writer) bool {
	ta, tb := reflect.TypeOf(a), reflect.TypeOf(b)
	return ta == tb && ta != nil && ta.Comparable() && a == b
}

// snapshot encodes (header and) the current state as whole chunks.
func (t *Tracer) snapshot(withHeader bool) []byte {
	var buf chunkBuf
	buf.b = copyChunk(nil)
	w, _ := format.NewWriter(&buf, t.hdr, &format.WriterOptions{ChunkSize: t.opts.ChunkSize})
	if !withHeader {
		buf.b = buf.b[:0]
	}
	now := monotonic()
	for _, p := range t.procs {
		w.WriteProcess(p)
	}
	w.WriteClockSync(t.start)
	for tid, th := range t.threads {
		w.WriteThreadStart(format.ThreadStart{Time: now, Pid: th.pid, Tid: tid})
		if th.name != "" {
			w.WriteThreadName(format.ThreadName{Time: now, Pid: th.pid, Tid: tid, Name: th.name})
		}
	}
	for _, m := range t.modules {
		w.WriteModuleLoad(&m)
	}
	for i, s := range t.strList {
		w.WriteString(uint64(i+1), s)
	}
	first, last := t.stacks.ids()
	for id := first; id <= last; id++ {
		w.WriteStack(id, t.stacks.get(id))
	}
	for _, c := range t.jit {
		w.WriteJITCode(&c)
	}
	for i, ls := range t.labelSets {
		w.WriteLabelSet(uint64(i+1), ls)
	}
	t.python.replay(w)
	w.Close()
	return buf.b
}

type chunkBuf struct{ b []byte }

func (c *chunkBuf) Write(p []byte) (int, error) { c.b = append(c.b, p...); return len(p), nil }

// fanout hands one encoded chunk to every stream. Called with t.mu held.
func (t *Tracer) fanout(p []byte) {
	if len(p) >= 4 && string(p[:4]) == format.Magic[:4] {
		return // the master writer's header; streams get their own
	}
	samples, spans := t.inChunk, t.inChunkSpans
	t.inChunk, t.inChunkSpans = 0, 0
	for _, s := range t.streams {
		if s.failed() {
			continue
		}
		if s.resync {
			if len(s.ch) >= cap(s.ch)-1 {
				s.dropped += samples
				s.droppedAll += samples
				t.dropped += samples
				t.spansDropped += spans
				continue
			}
			s.offer(append(t.lostChunk(s.dropped), t.snapshot(false)...))
			s.resync, s.dropped = false, 0
		}
		if t.final && !s.resync {
			s.ch <- copyChunk(p)
			continue
		}
		if !s.offer(copyChunk(p)) {
			s.resync = true
			s.dropped += samples
			s.droppedAll += samples
			t.dropped += samples
			t.spansDropped += spans
		}
	}
}

// lostChunk encodes a chunk with one Lost event for n samples dropped
// by back-pressure.
func (t *Tracer) lostChunk(n uint64) []byte {
	var buf chunkBuf
	buf.b = copyChunk(nil)
	w, _ := format.NewWriter(&buf, t.hdr, nil)
	buf.b = buf.b[:0]
	w.WriteLost(format.Lost{Time: monotonic(), Count: n, Reason: format.LostBackpressure})
	w.Close()
	return buf.b
}

// Capture records the calling goroutine's stack now, as a Marker event
// named label on the calling thread.
func (t *Tracer) Capture(label string) error {
	if !t.self {
		return ErrNotSelf
	}
	var pcs [128]uintptr
	n := runtime.Callers(2, pcs[:])
	var stk [128]uint64
	for i := 0; i < n; i++ {
		stk[i] = uint64(pcs[i])
	}
	if n > 0 {
		stk[0]-- // a return address; point into the call instruction
	}
	tid := gettid()
	now := monotonic()
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return ErrStopped
	}
	name := t.internString(label)
	id := t.internStack(stk[:n])
	return t.w.WriteMarker(format.Marker{Time: now, Tid: uint32(tid), Name: name, Stack: id})
}

// internString returns the id of s, writing its definition when new.
// Called with t.mu held.
func (t *Tracer) internString(s string) uint64 {
	if id, ok := t.strings[s]; ok {
		return id
	}
	t.strList = append(t.strList, s)
	id := uint64(len(t.strList))
	t.strings[s] = id
	t.w.WriteString(id, s)
	return id
}

// internStack returns the id of pcs, writing its definition when new.
// Called with t.mu held.
func (t *Tracer) internStack(pcs []uint64) uint64 {
	if len(pcs) == 0 {
		return 0
	}
	id, isNew := t.stacks.intern(pcs)
	if isNew {
		t.w.WriteStack(id, pcs)
	}
	return id
}
