package symbolizer

import (
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"sort"
	"sync"

	"github.com/rawstack/rawstack/format"
)

// Location is one distinct code address of a profile.
type Location struct {
	// Module is the module the address fell in at sample time; nil when
	// it fell in none.
	Module *Module
	// Abs is the absolute address recorded on the host.
	Abs uint64
	// Addr is the module-relative address (format/SPEC.md): what symbol
	// tables and llvm-symbolizer --obj use. Without a module it is Abs;
	// when the module's file could not be read it is the file offset.
	Addr uint64
	// Caller says Abs is a return address: it was symbolized at Addr-1,
	// inside the call instruction, as perf and pprof do.
	Caller bool
	// Frames are the functions at the address, innermost inlined function
	// first; empty when nothing is known about it.
	Frames []Frame
}

// String names an unsymbolized location: "module+0xoff" or "0xaddr".
func (l *Location) String() string {
	if l.Module == nil {
		return fmt.Sprintf("%#x", l.Abs)
	}
	return fmt.Sprintf("%s+%#x", baseName(l.Module.Name()), l.Addr)
}

// FunctionName returns the name to show for frame i of the location,
// falling back to String for unknown functions.
func (l *Location) FunctionName(i int) string {
	if i < len(l.Frames) && l.Frames[i].Function != "" {
		return l.Frames[i].Function
	}
	return l.String()
}

func baseName(p string) string {
	for i := len(p) - 1; i >= 0; i-- {
		if p[i] == '/' || p[i] == '\\' {
			return p[i+1:]
		}
	}
	return p
}

// Sample is an aggregate of samples with the same stack.
type Sample struct {
	// Locs indexes Profile.Locations, leaf first.
	Locs []int
	// Count is the number of samples.
	Count int64
	// CPUNanos is the summed weight of on-CPU samples: the nanoseconds
	// of CPU they stand for (format/SPEC.md §6.10). In a profile whose
	// on-CPU samples are Unweighted it is their count.
	CPUNanos int64
	// OffCPUNanos is the summed weight of off-CPU samples (ns blocked).
	OffCPUNanos int64
	// Goroutine is the Go goroutine id the samples ran on (0: unknown),
	// and Labels its pprof labels; samples are aggregated per stack,
	// goroutine and label set.
	Goroutine uint64
	Labels    []format.Label
	// AllocBytes and AllocObjects are the unbiased bytes and
	// allocations sampled at the stack (Alloc events, format/SPEC.md
	// §6.22); InuseBytes and InuseObjects what of them was not freed by
	// the end of the trace.
	AllocBytes, AllocObjects int64
	InuseBytes, InuseObjects int64

	python uint64 // the PyStack spliced into Locs after symbolization (python.go)
}

// Profile is a symbolized profile built from a stream.
type Profile struct {
	Header    format.Header
	Modules   []*Module // every module loaded in the stream
	Locations []*Location
	Samples   []*Sample
	// Start and End bound the sample times (stream clock, ns).
	Start, End int64
	// Lost counts samples the host reported dropped; BadChunks the
	// damaged chunks skipped while reading; RawStacks the RawStack
	// events, unwound here with arch's CFI and frame-pointer unwinder;
	// UnknownStacks samples whose stack id was never defined.
	Lost, BadChunks, RawStacks, UnknownStacks int64
	// Timeline is the time-resolved view, kept when Options.Timeline
	// is set (timeline.go).
	Timeline *Timeline
	// Unweighted says every on-CPU sample of the stream weighs 1: a
	// stream written before weights were nanoseconds of CPU, or samples
	// that stand for no time (a snapshot). Their weight is a count, not
	// time (format/SPEC.md §6.10): exporters show samples, not seconds.
	Unweighted bool
	// Memory says the stream has Alloc events: the samples carry
	// allocated and in-use figures. UnmatchedFrees counts Frees of
	// addresses no sampled allocation held (frees of unsampled blocks).
	Memory         bool
	UnmatchedFrees int64
}

// TotalCount returns the number of samples in the profile.
func (p *Profile) TotalCount() int64 {
	var n int64
	for _, s := range p.Samples {
		n += s.Count
	}
	return n
}

// Build reads a stream to its end and returns the symbolized profile.
// Damaged chunks are skipped (and counted); modules whose files cannot be
// found keep their addresses as module+offset.
func Build(r *format.Reader, opts *Options) (*Profile, error) {
	if opts == nil {
		opts = &Options{}
	}
	if opts.TraceDir == "" && r.Name() != "" {
		o := *opts
		o.TraceDir = filepath.Dir(r.Name())
		opts = &o
	}
	b := newBuilder(r.Header())
	b.opts = opts
	if opts.Timeline {
		b.tl = newTimelineBuilder()
	}
	for {
		ev, err := r.Next()
		if err == io.EOF {
			break
		}
		var ce *format.ChunkError
		if errors.As(err, &ce) {
			b.p.BadChunks++
			opts.warn(err)
			continue
		}
		if err != nil {
			return nil, err
		}
		b.event(ev)
	}
	b.resolvePending()
	b.finish()
	b.raw.close()
	if b.tl != nil {
		b.p.Timeline = b.tl.finish()
	}
	if err := b.symbolize(opts); err != nil {
		return nil, err
	}
	b.splicePython()
	if b.tl != nil {
		b.tl.nameGoroutines(b.p)
	}
	return b.p, nil
}

type locKey struct {
	mod    uint64 // module ID + 1, 0 for none
	abs    uint64
	caller bool
	jit    int // the JIT entry naming the address (its sequence number), 0 for none
}

type stackKey struct {
	pid   uint32
	stack uint64
	gen   uint64
}

type builder struct {
	p       *Profile
	db      *ModuleDB
	stacks  map[uint64][]uint64
	locs    map[locKey]int
	norm    map[stackKey][]int // stack → location indices
	samples map[string]*Sample
	labels  map[uint64][]format.Label // LabelSet id → labels
	keyBuf  []byte
	first   bool
	opts    *Options
	raw     *rawUnwinder
	tl      *timelineBuilder // nil unless Options.Timeline
	rf      RuntimeFrames    // JIT, Python and JIT runtime frames (runtime.go)
	py      pyState          // their locations (python.go)

	// JIT code (jit.go)
	rtModules  map[string]*Module // pseudo-modules of runtime frames
	procNames  map[uint32]string
	pending    []pendingSample
	deferred   map[stackKey]bool
	jitMods    []*Module
	jitModules uint64

	live map[liveKey]liveAlloc // sampled blocks not freed yet (memory.go)

	// onCPU: the stream has on-CPU samples; weighted: one of them weighs
	// other than 1 (Profile.Unweighted).
	onCPU, weighted bool
}

func newBuilder(h format.Header) *builder {
	return &builder{
		p:         &Profile{Header: h},
		db:        NewModuleDB(),
		stacks:    map[uint64][]uint64{},
		locs:      map[locKey]int{},
		norm:      map[stackKey][]int{},
		samples:   map[string]*Sample{},
		labels:    map[uint64][]format.Label{},
		first:     true,
		procNames: map[uint32]string{},
	}
}

func (b *builder) event(ev *format.Event) {
	if b.tl != nil {
		b.tl.event(b, ev)
	}
	switch ev.Kind {
	case format.KindModuleLoad:
		b.db.Load(&ev.ModuleLoad)
	case format.KindModuleUnload:
		b.db.Unload(&ev.ModuleUnload)
	case format.KindStack:
		b.stacks[ev.Stack.ID] = append([]uint64(nil), ev.Stack.PCs...)
	case format.KindLost:
		b.p.Lost += int64(ev.Lost.Count)
	case format.KindRawStack:
		b.rawStack(&ev.RawStack)
	case format.KindSample:
		b.sample(&ev.Sample)
	case format.KindLabelSet:
		b.labels[ev.LabelSet.ID] = append([]format.Label(nil), ev.LabelSet.Labels...)
	case format.KindString, format.KindJITCode, format.KindJITUnload, format.KindPyCode, format.KindPyStack, format.KindJITFunc:
		b.rf.Event(ev)
	case format.KindProcess:
		b.procNames[ev.Process.Pid] = ev.Process.Name
	case format.KindAlloc:
		b.alloc(&ev.Alloc)
	case format.KindFree:
		b.free(&ev.Free)
	}
}

func (b *builder) sample(s *format.Sample) {
	b.span(s.Time)
	var locs []int
	if s.Stack != 0 {
		k := stackKey{s.Pid, s.Stack, b.db.Generation(s.Pid)}
		if b.deferStack(k, b.stacks[s.Stack], s.Time) {
			b.pending = append(b.pending, pendingSample{pid: s.Pid, tid: s.Tid, t: s.Time, weight: s.Weight, flags: s.Flags, stack: s.Stack, gen: k.gen,
				goid: s.Goroutine, labels: s.Labels, python: s.Python, link: s.Link})
			return
		}
		var ok bool
		if locs, ok = b.norm[k]; !ok {
			pcs, defined := b.stacks[s.Stack]
			if !defined {
				b.p.UnknownStacks++
			}
			locs = make([]int, len(pcs))
			for i, pc := range pcs {
				locs[i] = b.loc(s.Pid, pc, i > 0, s.Time)
			}
			b.norm[k] = locs
		}
	}
	b.addLinked(locs, s.Weight, s.Flags, s.Goroutine, s.Labels, s.Python, s.Link)
	if b.tl != nil {
		b.tl.sample(s.Time, s.Pid, s.Tid, s.Weight, s.Flags, locs, s.Python, s.Goroutine)
	}
}

// add aggregates one sample with the given locations.
func (b *builder) add(locs []int, weight uint64, flags format.SampleFlags) {
	b.addGo(locs, weight, flags, 0, 0, 0)
}

// addGo aggregates one sample with the given locations, goroutine and
// label set, and Python stack (spliced in after symbolization).
func (b *builder) addGo(locs []int, weight uint64, flags format.SampleFlags, goid, labels, python uint64) {
	b.addLinked(locs, weight, flags, goid, labels, python, format.SpanLink{})
}

// Labels of samples taken in a span linked to an OpenTelemetry span
// (format.Sample.Link): the trace and span ids in lower-case hex, the
// names Pyroscope's span profiles use.
const (
	LabelTraceID = "trace_id"
	LabelSpanID  = "span_id"
)

// addLinked is addGo for a sample that may carry the link to an
// OpenTelemetry span: the link becomes two labels of its own aggregate.
func (b *builder) addLinked(locs []int, weight uint64, flags format.SampleFlags, goid, labels, python uint64, link format.SpanLink) {
	agg := b.aggregate(locs, goid, labels, python, link)
	agg.Count++
	if flags&format.SampleOffCPU != 0 {
		agg.OffCPUNanos += int64(weight)
	} else {
		agg.CPUNanos += int64(weight)
		b.onCPU = true
		b.weighted = b.weighted || weight != 1
	}
}

// aggregate returns the Sample of locs, goroutine, label set, Python
// stack and span link, creating it empty.
func (b *builder) aggregate(locs []int, goid, labels, python uint64, link format.SpanLink) *Sample {
	// The length first, so what follows the locations is unambiguous.
	b.keyBuf = binary.AppendUvarint(b.keyBuf[:0], uint64(len(locs)))
	for _, l := range locs {
		b.keyBuf = binary.AppendUvarint(b.keyBuf, uint64(l))
	}
	linked := !link.IsZero()
	if goid != 0 || labels != 0 || python != 0 || linked {
		b.keyBuf = binary.AppendUvarint(b.keyBuf, goid)
		b.keyBuf = binary.AppendUvarint(b.keyBuf, labels)
		b.keyBuf = binary.AppendUvarint(b.keyBuf, python)
	}
	if linked {
		b.keyBuf = append(b.keyBuf, link.TraceID[:]...)
		b.keyBuf = append(b.keyBuf, link.SpanID[:]...)
	}
	agg := b.samples[string(b.keyBuf)]
	if agg == nil {
		agg = &Sample{Locs: locs, Goroutine: goid, Labels: b.pyLabels(b.labels[labels], python), python: python}
		if linked {
			agg.Labels = append(agg.Labels[:len(agg.Labels):len(agg.Labels)],
				format.Label{Key: LabelTraceID, Value: hex.EncodeToString(link.TraceID[:])},
				format.Label{Key: LabelSpanID, Value: hex.EncodeToString(link.SpanID[:])})
		}
		b.samples[string(b.keyBuf)] = agg
		b.p.Samples = append(b.p.Samples, agg)
	}
	return agg
}

func (b *builder) span(t int64) {
	if b.first || t < b.p.Start {
		b.p.Start = t
	}
	if b.first || t > b.p.End {
		b.p.End = t
	}
	b.first = false
}

func (b *builder) loc(pid uint32, pc uint64, caller bool, t int64) int {
	m := b.db.Lookup(pid, pc, t)
	k := locKey{abs: pc, caller: caller}
	if m != nil {
		k.mod = m.ID + 1
	}
	if i, ok := b.locs[k]; ok {
		return i
	}
	i := len(b.p.Locations)
	b.p.Locations = append(b.p.Locations, &Location{Module: m, Abs: pc, Addr: pc, Caller: caller})
	b.locs[k] = i
	return i
}

func (b *builder) finish() {
	b.p.Unweighted = b.onCPU && !b.weighted
	b.p.Modules = b.db.Modules()
	if len(b.jitMods) > 0 {
		b.p.Modules = append(b.p.Modules[:len(b.p.Modules):len(b.p.Modules)], b.jitMods...)
	}
}

// fileKey identifies a module file: mappings of one file (several
// segments, several processes) share one Source.
type fileKey struct {
	kind    format.ModuleKind
	path    string
	buildID string
	// a PE image's identity: two builds at one path (a trace of several
	// hosts, or a rebuilt DLL) are different files
	pdbGUID       [16]byte
	pdbAge        uint32
	timeDateStamp uint32
	sizeOfImage   uint32
}

func keyOf(m *Module) fileKey {
	return fileKey{m.Kind, m.Path, string(m.BuildID), m.PDBGUID, m.PDBAge, m.TimeDateStamp, m.SizeOfImage}
}

// symbolize resolves the locations of each module file, independent files
// in parallel. Each distinct (file, address) is symbolized once.
func (b *builder) symbolize(opts *Options) error {
	groups := map[fileKey][]*Location{}
	var order []fileKey
	for _, l := range b.p.Locations {
		if l.Module == nil || l.Module.jit {
			continue // no module, or named from JIT events already
		}
		k := keyOf(l.Module)
		if _, ok := groups[k]; !ok {
			order = append(order, k)
		}
		groups[k] = append(groups[k], l)
	}
	// Big groups first so the workers finish together.
	sort.SliceStable(order, func(i, j int) bool { return len(groups[order[i]]) > len(groups[order[j]]) })
	workers := opts.Workers
	if workers <= 0 {
		workers = 2
	}
	total := len(b.p.Locations)
	var mu sync.Mutex
	done := total
	for _, g := range groups {
		done -= len(g)
	}
	progress := func(n int) {
		if opts.Progress == nil {
			return
		}
		mu.Lock()
		done += n
		d := done
		mu.Unlock()
		opts.Progress(d, total)
	}
	progress(0)
	work := make(chan fileKey)
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := range work {
				symbolizeFile(groups[k], opts, progress)
			}
		}()
	}
	for _, k := range order {
		work <- k
	}
	close(work)
	wg.Wait()
	return nil
}

func symbolizeFile(locs []*Location, opts *Options, progress func(int)) {
	m := locs[0].Module
	open := opener(m.Kind)
	if open == nil && m.Kind == format.ModuleUnknown {
		open = opener(format.ModuleELF)
	}
	var o *Opened
	if open != nil {
		var err error
		o, err = open(m, opts)
		if err != nil {
			opts.warn(fmt.Errorf("symbolizer: module %s: %w", m.Name(), err))
			o = nil
		}
	}
	if o != nil && o.Source != nil {
		defer o.Source.Close()
	}
	if o != nil && o.Source != nil {
		// Let a source that can build its tables in parallel do so for
		// the whole batch first.
		if pf, ok := o.Source.(interface{ Prefetch([]uint64, int) }); ok {
			addrs := make([]uint64, 0, len(locs))
			for _, l := range locs {
				if rel, ok := l.Module.Relative(l.Abs, o.Segments); ok {
					if l.Caller && rel > 0 {
						rel--
					}
					addrs = append(addrs, rel)
				}
			}
			w := opts.Workers
			if w <= 0 {
				w = 2
			}
			pf.Prefetch(addrs, w)
		}
	}
	type ak struct {
		addr   uint64
		caller bool
	}
	cache := map[ak][]Frame{}
	var buf []Frame
	for i, l := range locs {
		var segs []Segment
		if o != nil {
			segs = o.Segments
		}
		rel, ok := l.Module.Relative(l.Abs, segs)
		l.Addr = rel
		if o != nil && o.Source != nil && ok {
			k := ak{rel, l.Caller}
			fr, seen := cache[k]
			if !seen {
				look := rel
				if l.Caller && look > 0 {
					look--
				}
				buf, _ = o.Source.Symbolize(look, buf[:0])
				if len(buf) > 0 {
					fr = append([]Frame(nil), buf...)
				}
				cache[k] = fr
			}
			l.Frames = fr
		}
		if (i+1)%1024 == 0 {
			progress(1024)
		}
	}
	progress(len(locs) % 1024)
}
