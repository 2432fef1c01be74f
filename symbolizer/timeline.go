package symbolizer

import (
	"fmt"
	"sort"

	"github.com/rawstack/rawstack/format"
)

// Timeline is the time-resolved view of a stream: every sample with its
// time and thread, the spans, markers and counters, per thread. Build
// keeps it (in Profile.Timeline) when Options.Timeline is set. Stacks are
// indices into Profile.Locations, leaf first, as in Profile.Samples.
//
// In a Go program the goroutine, not the thread, is the unit of work: a
// span or marker recorded by a goroutine (format.SpanBegin.Goroutine) is
// on its goroutine's track, a Thread whose Goroutine is set, named
// "goroutine ID FUNCTION" after the goroutine's id and the function it
// started with, with no samples; samples stay on their thread and carry
// their goroutine where the trace knows it.
type Timeline struct {
	// Processes seen, in order of first appearance.
	Processes []*Process
	// Threads in order of first appearance; each belongs to one process.
	Threads []*Thread
	// Counters in order of first appearance.
	Counters []*CounterTrack
	// Start and End bound every event's time (stream clock, ns).
	Start, End int64
	// WallStart is the wall-clock time (ns since the Unix epoch) at
	// Start, from the stream's ClockSync; 0 when the stream has none.
	WallStart int64
}

// Process is a process of the timeline.
type Process struct {
	Pid  uint32
	Name string
}

// Thread is one thread's samples, spans and markers, each in time order,
// or one goroutine's spans and markers (Goroutine not 0; Tid is then
// GoroutineTid(Goroutine), a number no thread has, for outputs that key
// tracks by thread id).
type Thread struct {
	Pid, Tid  uint32
	Name      string
	Goroutine uint64
	Samples   []TimedSample
	Spans     []Span
	Markers   []Marker

	start int // a goroutine's start function's location, -1: unknown
}

// GoroutineTid is the thread id of goroutine goid's track: the high bit
// set, which no Linux or Windows thread id has.
func GoroutineTid(goid uint64) uint32 { return 1<<31 | uint32(goid&(1<<31-1)) }

// TimedSample is one sample.
type TimedSample struct {
	Time   int64
	Locs   []int // leaf first; shared between samples, do not modify
	Weight int64 // ns on CPU (the sampling period) or off CPU
	OffCPU bool
	// Goroutine is the Go goroutine the thread ran, 0 if not known.
	Goroutine uint64

	python uint64 // the PyStack spliced into Locs after symbolization (python.go)
}

// Span is a span of a thread: [Begin, End) with a name. Spans of a
// thread nest: Depth is the number of spans enclosing it. A span whose
// end was not recorded ends at the timeline's end (Open); one that
// outlived its enclosing span is clipped to it, one that ended before it
// began has no length (Clipped).
type Span struct {
	Name       string
	Begin, End int64
	ID, Parent uint64
	Depth      int
	Locs       []int // begin site, leaf first; nil when not captured
	Open       bool
	Clipped    bool
	// Tid is the thread the span began on; Link the OpenTelemetry span
	// it is linked to (zero: none).
	Tid  uint32
	Link format.SpanLink
}

// Marker is an instant event of a thread.
type Marker struct {
	Time int64
	Name string
	Locs []int // the captured stack, leaf first; nil when none
}

// CounterTrack is the values of one named counter.
type CounterTrack struct {
	Name   string
	Points []CounterPoint
}

// CounterPoint is one value of a counter.
type CounterPoint struct {
	Time  int64
	Value float64
}

// timelineBuilder collects the timeline while the profile is built.
type timelineBuilder struct {
	tl       *Timeline
	strings  map[uint64]string
	procs    map[uint32]*Process
	threads  map[uint32]*Thread // by tid
	gos      map[goKey]*Thread
	counters map[string]*CounterTrack
	open     map[uint64]openSpan // span id → where it is
	mainPid  uint32
	first    bool
	clock    format.ClockSync
}

type goKey struct {
	pid  uint32
	goid uint64
}

type openSpan struct {
	th  *Thread
	idx int
}

func newTimelineBuilder() *timelineBuilder {
	return &timelineBuilder{
		tl:       &Timeline{},
		strings:  map[uint64]string{},
		procs:    map[uint32]*Process{},
		threads:  map[uint32]*Thread{},
		gos:      map[goKey]*Thread{},
		counters: map[string]*CounterTrack{},
		open:     map[uint64]openSpan{},
		first:    true,
	}
}

func (tb *timelineBuilder) at(t int64) {
	if tb.first || t < tb.tl.Start {
		tb.tl.Start = t
	}
	if tb.first || t > tb.tl.End {
		tb.tl.End = t
	}
	tb.first = false
}

func (tb *timelineBuilder) process(pid uint32) *Process {
	p := tb.procs[pid]
	if p == nil {
		p = &Process{Pid: pid}
		tb.procs[pid] = p
		tb.tl.Processes = append(tb.tl.Processes, p)
		if tb.mainPid == 0 {
			tb.mainPid = pid
		}
	}
	return p
}

// thread returns the thread tid, creating it in process pid (0: the
// stream's first process, for events that carry only a tid).
func (tb *timelineBuilder) thread(pid, tid uint32) *Thread {
	th := tb.threads[tid]
	if th == nil {
		if pid == 0 {
			pid = tb.mainPid
		}
		tb.process(pid)
		th = &Thread{Pid: pid, Tid: tid}
		tb.threads[tid] = th
		tb.tl.Threads = append(tb.tl.Threads, th)
	}
	return th
}

// goroutine returns goroutine goid's track in process pid.
func (tb *timelineBuilder) goroutine(pid uint32, goid uint64) *Thread {
	k := goKey{pid, goid}
	g := tb.gos[k]
	if g == nil {
		g = &Thread{Pid: pid, Tid: GoroutineTid(goid), Goroutine: goid, Name: fmt.Sprintf("goroutine %d", goid), start: -1}
		tb.gos[k] = g
		tb.tl.Threads = append(tb.tl.Threads, g)
	}
	return g
}

// track returns where a span or marker of thread tid and goroutine goid
// goes: its goroutine's track, else its thread's.
func (tb *timelineBuilder) track(tid uint32, goid uint64) *Thread {
	th := tb.thread(0, tid)
	if goid == 0 {
		return th
	}
	return tb.goroutine(th.Pid, goid)
}

// nameGoroutines names goroutine tracks after their start function,
// once the locations are symbolized.
func (tb *timelineBuilder) nameGoroutines(p *Profile) {
	for _, g := range tb.gos {
		if g.start >= 0 && g.start < len(p.Locations) {
			if fn := p.Locations[g.start].FunctionName(0); fn != "" {
				g.Name = fmt.Sprintf("goroutine %d %s", g.Goroutine, fn)
			}
		}
	}
}

// event takes the events the aggregate profile does not use.
func (tb *timelineBuilder) event(b *builder, ev *format.Event) {
	switch ev.Kind {
	case format.KindString:
		tb.strings[ev.String.ID] = ev.String.Value
	case format.KindClockSync:
		if tb.clock.WallNano == 0 {
			tb.clock = ev.ClockSync
		}
	case format.KindProcess:
		p := tb.process(ev.Process.Pid)
		p.Name = ev.Process.Name
	case format.KindThreadStart:
		tb.thread(ev.ThreadStart.Pid, ev.ThreadStart.Tid)
	case format.KindThreadName:
		tb.thread(ev.ThreadName.Pid, ev.ThreadName.Tid).Name = ev.ThreadName.Name
	case format.KindSpanBegin:
		e := &ev.SpanBegin
		tb.at(e.Time)
		th := tb.track(e.Tid, e.Goroutine)
		s := Span{Name: tb.strings[e.Name], Begin: e.Time, End: -1, ID: e.ID, Parent: e.Parent, Tid: e.Tid, Link: e.Link}
		if e.Stack != 0 {
			s.Locs = b.stackLocs(th.Pid, e.Stack, e.Time)
		}
		if e.GoStart != 0 && th.Goroutine != 0 && th.start < 0 {
			if locs := b.stackLocs(th.Pid, e.GoStart, e.Time); len(locs) > 0 {
				th.start = locs[0]
			}
		}
		tb.open[e.ID] = openSpan{th, len(th.Spans)}
		th.Spans = append(th.Spans, s)
	case format.KindSpanEnd:
		e := &ev.SpanEnd
		tb.at(e.Time)
		if o, ok := tb.open[e.ID]; ok {
			o.th.Spans[o.idx].End = e.Time
			delete(tb.open, e.ID)
		}
	case format.KindMarker:
		e := &ev.Marker
		tb.at(e.Time)
		th := tb.track(e.Tid, e.Goroutine)
		m := Marker{Time: e.Time, Name: tb.strings[e.Name]}
		if e.Stack != 0 {
			m.Locs = b.stackLocs(th.Pid, e.Stack, e.Time)
		}
		th.Markers = append(th.Markers, m)
	case format.KindCounter:
		e := &ev.Counter
		tb.at(e.Time)
		name := tb.strings[e.Name]
		c := tb.counters[name]
		if c == nil {
			c = &CounterTrack{Name: name}
			tb.counters[name] = c
			tb.tl.Counters = append(tb.tl.Counters, c)
		}
		c.Points = append(c.Points, CounterPoint{e.Time, e.Value})
	}
}

func (tb *timelineBuilder) sample(t int64, pid, tid uint32, weight uint64, flags format.SampleFlags, locs []int, python, goid uint64) {
	tb.at(t)
	th := tb.thread(pid, tid)
	th.Samples = append(th.Samples, TimedSample{Time: t, Locs: locs, Weight: int64(weight), OffCPU: flags&format.SampleOffCPU != 0, Goroutine: goid, python: python})
}

// finish sorts each thread's events by time, closes open spans at the
// end and computes span depths, clipping spans to their enclosing one.
func (tb *timelineBuilder) finish() *Timeline {
	tl := tb.tl
	if tb.clock.WallNano != 0 {
		tl.WallStart = tb.clock.WallNano + (tl.Start - tb.clock.Time)
	}
	for _, th := range tl.Threads {
		sort.SliceStable(th.Samples, func(i, j int) bool { return th.Samples[i].Time < th.Samples[j].Time })
		sort.SliceStable(th.Markers, func(i, j int) bool { return th.Markers[i].Time < th.Markers[j].Time })
		for i := range th.Spans {
			s := &th.Spans[i]
			if s.End < 0 {
				s.End, s.Open = tl.End, true
			}
			if s.End < s.Begin { // an end stamped before its begin
				s.End, s.Clipped = s.Begin, true
			}
		}
		sort.SliceStable(th.Spans, func(i, j int) bool {
			a, b := &th.Spans[i], &th.Spans[j]
			if a.Begin != b.Begin {
				return a.Begin < b.Begin
			}
			return a.End > b.End // the enclosing span first
		})
		var ends []int64
		for i := range th.Spans {
			s := &th.Spans[i]
			for len(ends) > 0 && ends[len(ends)-1] <= s.Begin {
				ends = ends[:len(ends)-1]
			}
			if len(ends) > 0 && s.End > ends[len(ends)-1] {
				s.End, s.Clipped = ends[len(ends)-1], true
			}
			s.Depth = len(ends)
			ends = append(ends, s.End)
		}
	}
	sort.SliceStable(tl.Threads, func(i, j int) bool {
		a, b := tl.Threads[i], tl.Threads[j]
		if a.Pid != b.Pid {
			return a.Pid < b.Pid
		}
		return a.Tid < b.Tid
	})
	for _, c := range tl.Counters {
		sort.SliceStable(c.Points, func(i, j int) bool { return c.Points[i].Time < c.Points[j].Time })
	}
	return tl
}

// stackLocs returns the locations of an interned stack of process pid.
func (b *builder) stackLocs(pid uint32, stack uint64, t int64) []int {
	k := stackKey{pid, stack, b.db.Generation(pid)}
	if locs, ok := b.norm[k]; ok {
		return locs
	}
	pcs, defined := b.stacks[stack]
	if !defined {
		b.p.UnknownStacks++
	}
	locs := make([]int, len(pcs))
	for i, pc := range pcs {
		locs[i] = b.loc(pid, pc, i > 0, t)
	}
	b.norm[k] = locs
	return locs
}
