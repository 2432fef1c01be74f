package symbolizer

import (
	"sort"

	"github.com/rawstack/rawstack/format"
)

// Timeline is the time-resolved view of a stream: every sample with its
// time and thread, the spans, markers and counters, per thread. Build
// keeps it (in Profile.Timeline) when Options.Timeline is set. Stacks are
// indices into Profile.Locations, leaf first, as in Profile.Samples.
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

// Thread is one thread's samples, spans and markers, each in time order.
type Thread struct {
	Pid, Tid uint32
	Name     string
	Samples  []TimedSample
	Spans    []Span
	Markers  []Marker
}

// TimedSample is one sample.
type TimedSample struct {
	Time   int64
	Locs   []int // leaf first; shared between samples, do not modify
	Weight int64 // ns on CPU (the sampling period) or off CPU
	OffCPU bool

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
	counters map[string]*CounterTrack
	open     map[uint64]openSpan // span id → where it is
	mainPid  uint32
	first    bool
	clock    format.ClockSync
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
		th := tb.thread(0, e.Tid)
		s := Span{Name: tb.strings[e.Name], Begin: e.Time, End: -1, ID: e.ID, Parent: e.Parent}
		if e.Stack != 0 {
			s.Locs = b.stackLocs(th.Pid, e.Stack, e.Time)
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
		th := tb.thread(0, e.Tid)
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

func (tb *timelineBuilder) sample(t int64, pid, tid uint32, weight uint64, flags format.SampleFlags, locs []int, python uint64) {
	tb.at(t)
	th := tb.thread(pid, tid)
	th.Samples = append(th.Samples, TimedSample{Time: t, Locs: locs, Weight: int64(weight), OffCPU: flags&format.SampleOffCPU != 0, python: python})
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
