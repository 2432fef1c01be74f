package tracer

import (
	"context"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rawstack/rawstack/format"
)

// Spans, markers and counters
//
// The hot path (Tracer.Span, Span.End, Tracer.Marker, Tracer.Counter) takes
// no lock and allocates nothing: the calling goroutine pins itself to its
// P (the runtime's processor; no preemption while pinned, so no other
// writer of that P's ring can interleave), appends one fixed-size record
// to that P's single-producer ring, and unpins. A drain goroutine of the
// tracer empties the rings every spanDrainInterval (and at Stop), interns
// the names and encodes the records as SpanBegin/SpanEnd/Marker/Counter
// events. A full ring drops the record and counts it; the count is written
// as a Lost event, never silently.
//
// Each record carries the OS thread the goroutine ran on. Asking the
// kernel (gettid) on every record costs a system call; instead each ring
// caches the thread id of the runtime M (OS thread) it last saw, keyed by
// the M's address, and asks again only when its P has moved to another M.

const (
	spanRingSize      = 1 << 13 // records per P
	spanDrainInterval = 50 * time.Millisecond
)

type spanKind uint8

const (
	recBegin spanKind = iota + 1
	recEnd
	recMarker
	recCounter
)

type spanRec struct {
	time   int64
	id     uint64
	parent uint64
	name   string
	value  float64
	tid    uint32
	kind   spanKind
}

// spanRing is one P's ring. head is written only by the pinned producer,
// tail only by the drain goroutine.
type spanRing struct {
	head atomic.Uint64
	_    [56]byte
	tail atomic.Uint64
	lost atomic.Uint64
	_    [48]byte
	seq  uint64 // span ids issued on this P (producer only)
	m    uintptr
	tid  uint32
	kick chan struct{} // the drain goroutine's wake-up
	recs [spanRingSize]spanRec
}

type spanState struct {
	rings    []*spanRing
	on       atomic.Bool
	drainq   chan struct{}
	kick     chan struct{}
	drained  chan struct{}
	lostSeen uint64 // drain goroutine only
}

// spanCtxKey carries the current span id in a context.Context.
type spanCtxKey struct{}

// Span is an open span returned by [Tracer.Span]; [Span.End] closes it.
// The zero Span, returned when the tracer is nil, stopped or records
// another process, does nothing.
type Span struct {
	t      *Tracer
	id     uint64
	linked bool // opened by SpanLink
}

// Span opens a span named name on the calling goroutine's thread, now.
// Its parent is the span carried by ctx (see [Span.Context]), if any;
// spans also nest by time on their thread. name should be a constant or
// otherwise long-lived string: it is interned when the span is encoded.
//
//	sp := t.Span(ctx, "parse")
//	defer sp.End()
//
// Span and End take no lock and do not allocate. On a nil *Tracer, a
// stopped tracer or a tracer of another process they do nothing.
func (t *Tracer) Span(ctx context.Context, name string) Span {
	if t != nil && t.sp.on.Load() {
		return t.span(ctx, name)
	}
	return Span{} // inlined: the whole cost of tracing off
}

func (t *Tracer) span(ctx context.Context, name string) Span {
	var parent uint64
	if ctx != nil {
		if v, ok := ctx.Value(spanCtxKey{}).(uint64); ok {
			parent = v
		}
	}
	p := procPin()
	if p >= len(t.sp.rings) {
		procUnpin()
		return Span{}
	}
	r := t.sp.rings[p]
	r.seq++
	id := r.seq*uint64(len(t.sp.rings)) + uint64(p) + 1
	r.put(recBegin, id, parent, name, 0)
	procUnpin()
	return Span{t: t, id: id}
}

// End closes the span now. Calling End on the zero Span does nothing.
func (s Span) End() {
	if s.t != nil {
		s.t.sp.end(s.id)
		if s.linked {
			s.t.links.end(s.id, spanNow())
		}
	}
}

//go:noinline
func (s *spanState) end(id uint64) {
	if s.on.Load() {
		s.record(recEnd, id, 0, "", 0)
	}
}

// ID returns the span's id as written in the trace (0 for the zero Span).
func (s Span) ID() uint64 { return s.id }

// Context returns a copy of ctx carrying the span, so that spans opened
// with it are its children (even on other goroutines). It allocates the
// context; the zero Span returns ctx unchanged.
func (s Span) Context(ctx context.Context) context.Context {
	if s.t == nil {
		return ctx
	}
	return context.WithValue(ctx, spanCtxKey{}, s.id)
}

// Marker records an instant event named name on the calling goroutine's
// thread. It takes no lock and does not allocate; see [Tracer.Capture]
// for a marker with the calling stack.
func (t *Tracer) Marker(name string) {
	if t != nil {
		t.sp.record(recMarker, 0, 0, name, 0)
	}
}

// Counter records value as the current value of the counter named name.
// It takes no lock and does not allocate.
func (t *Tracer) Counter(name string, value float64) {
	if t != nil {
		t.sp.record(recCounter, 0, 0, name, value)
	}
}

//go:noinline
func (s *spanState) record(k spanKind, id, parent uint64, name string, v float64) {
	if !s.on.Load() {
		return
	}
	p := procPin()
	if p < len(s.rings) {
		s.rings[p].put(k, id, parent, name, v)
	}
	procUnpin()
}

// put appends a record. Called pinned to the ring's P.
func (r *spanRing) put(k spanKind, id, parent uint64, name string, v float64) {
	h := r.head.Load()
	if h-r.tail.Load() >= spanRingSize {
		r.lost.Add(1)
		return
	}
	m := curM()
	if m == 0 || m != r.m {
		r.tid = uint32(gettid())
		r.m = m
	}
	if h-r.tail.Load() == spanRingSize/2 {
		select { // half full: wake the drain goroutine early
		case r.kick <- struct{}{}:
		default:
		}
	}
	e := &r.recs[h%spanRingSize]
	e.time = spanNow()
	e.id, e.parent, e.name, e.value, e.tid, e.kind = id, parent, name, v, r.tid, k
	r.head.Store(h + 1)
}

// startSpans enables the span API of a tracer of the calling process.
func (t *Tracer) startSpans() {
	if !t.self {
		return
	}
	n := runtime.GOMAXPROCS(0)
	checkGetMOnce.Do(checkGetM)
	t.sp.rings = make([]*spanRing, n)
	t.sp.kick = make(chan struct{}, 1)
	for i := range t.sp.rings {
		t.sp.rings[i] = &spanRing{kick: t.sp.kick}
	}
	t.sp.drainq = make(chan struct{})
	t.sp.drained = make(chan struct{})
	t.sp.on.Store(true)
	go t.spanDrainer()
}

func (t *Tracer) spanDrainer() {
	defer close(t.sp.drained)
	tk := time.NewTicker(spanDrainInterval)
	defer tk.Stop()
	for {
		select {
		case <-tk.C:
			t.drainSpans()
		case <-t.sp.kick:
			t.drainSpans()
		case <-t.sp.drainq:
			return
		}
	}
}

// stopSpans turns the API off and encodes what the rings still hold.
func (t *Tracer) stopSpans() {
	if t.sp.drainq == nil {
		return
	}
	t.sp.on.Store(false)
	close(t.sp.drainq)
	<-t.sp.drained
	t.drainSpans()
}

// drainSpans encodes the records of every ring. Only the drain goroutine
// (or Stop, after it exited) calls it.
func (t *Tracer) drainSpans() {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return
	}
	var lost uint64
	for _, r := range t.sp.rings {
		lost += r.lost.Load()
		tail := r.tail.Load()
		head := r.head.Load()
		for i := tail; i != head; i++ {
			e := &r.recs[i%spanRingSize]
			t.writeSpanRec(e)
			e.name = "" // let the string go
		}
		r.tail.Store(head)
	}
	if lost > t.sp.lostSeen {
		t.w.WriteLost(format.Lost{Time: spanNow(), Count: lost - t.sp.lostSeen, Reason: format.LostBackpressure})
		t.sp.lostSeen = lost
	}
}

func (t *Tracer) writeSpanRec(e *spanRec) {
	switch e.kind {
	case recBegin:
		t.w.WriteSpanBegin(format.SpanBegin{Time: e.time, Tid: e.tid, ID: e.id, Parent: e.parent, Name: t.internString(e.name)})
	case recEnd:
		t.w.WriteSpanEnd(format.SpanEnd{Time: e.time, Tid: e.tid, ID: e.id})
	case recMarker:
		t.w.WriteMarker(format.Marker{Time: e.time, Tid: e.tid, Name: t.internString(e.name)})
	case recCounter:
		t.w.WriteCounter(format.Counter{Time: e.time, Name: t.internString(e.name), Value: e.value})
	}
}

var checkGetMOnce sync.Once

// CaptureSpan opens a span like [Tracer.Span] and records the calling
// goroutine's stack as its begin site. Unlike Span it takes the tracer's
// lock and walks the stack (microseconds): use it where the stack is
// worth that.
func (t *Tracer) CaptureSpan(ctx context.Context, name string) Span {
	if t == nil || !t.sp.on.Load() {
		return Span{}
	}
	var parent uint64
	if ctx != nil {
		if v, ok := ctx.Value(spanCtxKey{}).(uint64); ok {
			parent = v
		}
	}
	var pcs [128]uintptr
	n := runtime.Callers(2, pcs[:])
	var stk [128]uint64
	for i := 0; i < n; i++ {
		stk[i] = uint64(pcs[i])
	}
	if n > 0 {
		stk[0]--
	}
	p := procPin()
	if p >= len(t.sp.rings) {
		procUnpin()
		return Span{}
	}
	r := t.sp.rings[p]
	r.seq++
	id := r.seq*uint64(len(t.sp.rings)) + uint64(p) + 1
	procUnpin()
	tid := uint32(gettid())
	now := spanNow()
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return Span{}
	}
	t.w.WriteSpanBegin(format.SpanBegin{Time: now, Tid: tid, ID: id, Parent: parent,
		Name: t.internString(name), Stack: t.internStack(stk[:n])})
	return Span{t: t, id: id}
}
