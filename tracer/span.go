package tracer

import (
	"context"
	"math"
	"math/bits"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/rawstack/rawstack/format"
	"github.com/rawstack/rawstack/internal/goself"
)

// Spans, markers and counters
//
// The hot path (Tracer.Span, Span.End, Tracer.Marker, Tracer.Counter) takes
// no lock and allocates nothing: the calling goroutine pins itself to its
// P (the runtime's processor; no preemption while pinned, so no other
// writer of that P's ring can interleave), appends one fixed-size record
// to that P's single-producer ring, and unpins. A drain goroutine of the
// tracer empties the rings every spanDrainInterval, and early when a ring
// is half full, interns the names and encodes the records as
// SpanBegin/SpanEnd/Marker/Counter events.
//
// A ring never drops a record because the drain goroutine fell behind
// (it can: on a loaded machine, or with more producing goroutines than
// cores, it does not get the CPU). The producer that finds its ring full
// first yields to the drain goroutine, which frees the ring's slots as it
// encodes them (the encoding then overlaps with the producer's work, on
// another CPU); if no room appears, it encodes the rings itself, under
// the tracer's lock, and then writes its record. Spans from a tight loop
// are thus recorded at the rate the encoder sustains, and the cost of
// encoding shows where it is paid. Only a record that meets a full ring
// while the tracer stops (or that finds no room after all that) is
// dropped; it is counted in [Stats].SpansLost and, when the drain still
// runs, in a Lost event.
//
// Records are stamped with the CPU's time-stamp counter where the kernel
// itself trusts it (clock source "tsc", constant and non-stop counter; a
// third of the cost of a vDSO clock read here), and mapped to the stream's
// CLOCK_MONOTONIC nanoseconds when drained: every drain reads the pair
// (counter, monotonic) once and the records since the previous drain are
// placed by linear interpolation between the two pairs, so the mapping is
// exact at every drain and monotonic. Elsewhere records read the vDSO
// clock (see tscTrusted).
//
// Each record carries the OS thread the goroutine ran on. Asking the
// kernel (gettid) on every record costs a system call; instead each ring
// caches the thread id of the runtime M (OS thread) it last saw, keyed by
// the M's address, and asks again only when its P has moved to another M.
//
// With the TSC as the clock, on linux/amd64, one assembly call
// (spanCommit) checks the M, reads the counter, fills in the record and
// publishes it; the two counter reads are then most of what a span costs
// (about 9 ns each on the 2-core AMD EPYC VM this was measured on). The
// producer reads the ring's tail, a cache line the drain writes, only when
// its head reaches the last tail it saw plus the ring's size, or the point
// at which it wakes the drain.

const (
	spanRingSize      = 1 << 14 // records per P
	spanDrainInterval = 50 * time.Millisecond
	spanNameCache     = 64  // drain-side cache of interned names, by string address
	spanFreeEvery     = 512 // records a drain encodes before it frees their slots
	spanFullTries     = 256 // a producer's waits for room in a full ring (then it drops)
)

type spanKind uint8

const (
	recBegin spanKind = iota + 1
	recEnd
	recMarker
	recCounter
)

// spanRec is one buffered record: fixed size (72 bytes), raw values, no
// encoding on the hot path.
type spanRec struct {
	time int64  // spanTick: TSC or monotonic ns
	id   uint64 // span id (SpanBegin, SpanEnd)
	aux  uint64 // parent span id (SpanBegin) or the value's bits (Counter)
	name string
	link *linkSpan // a linked span's begin and end (spanlink.go)
	// The goroutine that recorded a SpanBegin or Marker, and the pc of
	// the function it started with (0: unknown).
	goid, gostart uint64
	tid           uint32
	kind          spanKind
}

// spanRing is one P's ring. head is written only by the pinned producer
// (publish), tail only by whoever holds the tracer's lock and drains.
type spanRing struct {
	head uint64
	_    [56]byte
	tail atomic.Uint64
	lost atomic.Uint64
	_    [48]byte
	seq  uint64 // span ids issued on this P (producer only)
	// The producer's view of the tail: it reads tail (a cache line the
	// drain writes) only when head reaches limit or kickAt.
	limit  uint64 // tail + spanRingSize, as last read
	kickAt uint64 // head at which to wake the drain goroutine
	m      uintptr
	tid    uint32
	kick   chan struct{} // the drain goroutine's wake-up
	recs   [spanRingSize]spanRec
}

type spanState struct {
	t *Tracer
	// rings holds a ring per P, made at the first record: 1.2 MiB per
	// P of records that hold pointers, which every GC cycle scans, so a
	// program that records no span does not pay for them (issue 32:
	// 13% of a service's throughput at any sampling rate).
	rings    atomic.Pointer[[]*spanRing]
	ringsMu  sync.Mutex
	nRings   int
	on       atomic.Bool
	drainq   chan struct{}
	kick     chan struct{}
	drained  chan struct{}
	lostSeen uint64 // under t.mu
	heads    []uint64
	clk      spanClock
	names    [spanNameCache]spanName
	// interned one-frame stacks of goroutines' start functions, by pc,
	// and the stack table's resets when they were
	gostarts map[uint64]uint64
	gen      int
	noHelp   bool // tests: drop on a full ring instead of draining it
}

// spanName caches the interned id of a name by the address of its bytes:
// the entry holds the string, so its bytes stay allocated and an equal
// address and length mean equal contents (strings are immutable). A span
// name is usually a constant, so this saves hashing it on every record.
type spanName struct {
	s  string
	id uint64
}

// spanUseTSC says that records are stamped with the TSC; set once, before
// the first span API is turned on.
var (
	spanUseTSC   bool
	spanFast     bool // stamp and publish with spanCommit
	spanTSCProbe sync.Once
	// Offsets in the runtime's g and m (package internal/goself; 0:
	// not known): a record's goroutine and its start function, the
	// thread id of an m.
	spanGoidOff, spanStartOff, spanProcidOff uintptr
)

// spanTick is a record's time stamp: TSC ticks or monotonic nanoseconds.
func spanTick() int64 {
	if spanUseTSC {
		return rdtsc()
	}
	return spanNow()
}

// spanClock maps TSC ticks to monotonic nanoseconds, piecewise linearly
// between the (ticks, ns) pairs read at each drain. Used under t.mu.
type spanClock struct {
	t, n int64  // the last pair
	mult uint64 // ns per tick, fixed point with 32 fraction bits
}

// readClockPair reads the TSC and the monotonic clock together: the
// monotonic reading between two TSC readings, paired with their middle.
// Of four tries it keeps the one whose TSC readings lie closest: a thread
// preempted between them (27 µs once on a loaded CI host) put every
// marker stamped until the next drain that much late.
func readClockPair() (tick, ns int64) {
	best := int64(-1)
	for i := 0; i < 4; i++ {
		a := rdtsc()
		n := spanNow()
		b := rdtsc()
		if d := b - a; best < 0 || d < best {
			best, tick, ns = d, a+d/2, n
		}
	}
	return tick, ns
}

// advance reads a new pair and returns the mapping of ticks stamped since
// the previous one.
func (c *spanClock) advance() spanMap {
	t1, n1 := readClockPair()
	if t1 > c.t && n1 > c.n {
		c.mult = uint64(float64(n1-c.n) / float64(t1-c.t) * (1 << 32))
		m := spanMap{t0: c.t, n0: c.n, mult: c.mult}
		c.t, c.n = t1, n1
		return m
	}
	return spanMap{t0: c.t, n0: c.n, mult: c.mult}
}

// spanMap maps the ticks of one drain's records to nanoseconds: an integer
// multiply (a float conversion and multiply cost the drain twice as much).
type spanMap struct {
	t0, n0 int64
	mult   uint64
}

func (m spanMap) ns(tick int64) int64 {
	// |tick-t0| * mult needs up to 96 bits when a drain comes seconds late.
	if d := tick - m.t0; d >= 0 {
		hi, lo := bits.Mul64(uint64(d), m.mult)
		return m.n0 + int64(hi<<32|lo>>32)
	} else {
		hi, lo := bits.Mul64(uint64(-d), m.mult)
		return m.n0 - int64(hi<<32|lo>>32)
	}
}

// spanCtxKey carries the current span id in a context.Context.
type spanCtxKey struct{}

// Span is an open span returned by [Tracer.Span]; [Span.End] closes it.
// The zero Span, returned when the tracer is nil, stopped or records
// another process, does nothing.
type Span struct {
	t  *Tracer
	id uint64
	lk *linkSpan // opened by SpanLink
}

// Span opens a span named name on the calling goroutine, now. Its parent
// is the span carried by ctx (see [Span.Context]), if any; spans also
// nest by time on their goroutine. The trace records the goroutine (id
// and start function) and the OS thread it ran on when the span began:
// timelines draw a Go span on its goroutine's track. name should be a
// constant or otherwise long-lived string: it is interned when the span
// is encoded.
//
//	sp := t.Span(ctx, "parse")
//	defer sp.End()
//
// Span and End do not allocate, and take no lock unless the calling
// P's ring is full: the caller then encodes the buffered records itself
// rather than drop its own. On a nil *Tracer, a stopped tracer or a
// tracer of another process they do nothing.
func (t *Tracer) Span(ctx context.Context, name string) Span {
	if t != nil && t.sp.on.Load() {
		return t.span(ctx, name)
	}
	return Span{} // inlined: the whole cost of tracing off
}

func (t *Tracer) span(ctx context.Context, name string) Span {
	return t.spanOpen(ctx, name, nil)
}

// spanOpen opens a span, linked when lk is not nil.
func (t *Tracer) spanOpen(ctx context.Context, name string, lk *linkSpan) Span {
	var parent uint64
	if ctx != nil && !isBackground(ctx) {
		if v, ok := ctx.Value(spanCtxKey{}).(uint64); ok {
			parent = v
		}
	}
	rings := t.sp.use()
	p := procPin()
	if uint(p) >= uint(len(rings)) {
		procUnpin()
		return Span{}
	}
	r := rings[p]
	id := r.nextSeq()*uint64(len(rings)) + uint64(p) + 1
	ok := r.put(recBegin, id, parent, name, lk)
	procUnpin()
	if !ok {
		t.sp.full(recBegin, id, parent, name, lk)
	}
	return Span{t: t, id: id, lk: lk}
}

// isBackground says ctx is context.Background() without calling its Value
// method: the type of Background's value has size 0, so every value of
// that type is Background and comparing the interfaces' type words is
// enough (== on the interfaces calls the runtime's ifaceeq).
func isBackground(ctx context.Context) bool {
	bg := context.Background() // inlined: a constant type word, no package variable to initialize
	return (*[2]unsafe.Pointer)(unsafe.Pointer(&ctx))[0] == (*[2]unsafe.Pointer)(unsafe.Pointer(&bg))[0]
}

// End closes the span now. Calling End on the zero Span does nothing.
func (s Span) End() {
	if s.t != nil {
		s.t.spanEnd(s.id, s.lk) // End inlines into the caller: one call
	}
}

func (t *Tracer) spanEnd(id uint64, lk *linkSpan) {
	if t.sp.on.Load() {
		rings := t.sp.use()
		p := procPin()
		ok := uint(p) >= uint(len(rings)) || rings[p].put(recEnd, id, 0, "", lk)
		procUnpin()
		if !ok {
			t.sp.full(recEnd, id, 0, "", lk)
		}
	}
	if lk != nil {
		lk.restoreLabels()
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
// thread. Like [Tracer.Span] it does not allocate and takes no lock
// unless its ring is full; see [Tracer.Capture] for a marker with the
// calling stack.
func (t *Tracer) Marker(name string) {
	if t != nil {
		t.sp.record(recMarker, 0, name)
	}
}

// Counter records value as the current value of the counter named name.
// Like [Tracer.Span] it does not allocate and takes no lock unless its
// ring is full.
func (t *Tracer) Counter(name string, value float64) {
	if t != nil {
		t.sp.record(recCounter, math.Float64bits(value), name)
	}
}

//go:noinline
func (s *spanState) record(k spanKind, aux uint64, name string) {
	if !s.on.Load() {
		return
	}
	rings := s.use()
	p := procPin()
	ok := uint(p) >= uint(len(rings)) || rings[p].put(k, 0, aux, name, nil)
	procUnpin()
	if !ok {
		s.full(k, 0, aux, name, nil)
	}
}

// full handles a record that met a full ring: the producer drains the
// rings itself (back-pressure instead of loss) and retries; the record
// is dropped, and counted, only when the tracer stops meanwhile.
//
//go:noinline
func (s *spanState) full(k spanKind, id, aux uint64, name string, lk *linkSpan) {
	rings := s.use()
	for try := 0; try < spanFullTries && !s.noHelp && s.on.Load(); try++ {
		switch {
		case try < spanFullTries/2:
			// Let the drain goroutine run, here or on another CPU: it
			// frees the ring's slots as it goes, so the record fits
			// again in a moment, and the encoding overlaps with this
			// goroutine's work instead of adding to it.
			select {
			case s.kick <- struct{}{}:
			default:
			}
			runtime.Gosched()
		case s.t.mu.TryLock():
			s.t.drainSpansLocked()
			s.t.mu.Unlock()
		default:
			s.t.drainSpans() // wait for the lock
		}
		p := procPin()
		ok := p >= len(rings) || rings[p].put(k, id, aux, name, lk)
		procUnpin()
		if ok {
			return
		}
	}
	p := procPin()
	if p < len(rings) {
		rings[p].lost.Add(1)
	}
	procUnpin()
}

// ringsNow returns the rings, nil before the first record.
func (s *spanState) ringsNow() []*spanRing {
	if p := s.rings.Load(); p != nil {
		return *p
	}
	return nil
}

// use returns the rings, made at the first call (before a producer pins
// itself to its P: it allocates). Without the span API (the tracer of
// another process) there are none.
func (s *spanState) use() []*spanRing {
	if p := s.rings.Load(); p != nil {
		return *p
	}
	s.ringsMu.Lock()
	defer s.ringsMu.Unlock()
	if p := s.rings.Load(); p != nil {
		return *p
	}
	rings := make([]*spanRing, s.nRings)
	for i := range rings {
		rings[i] = &spanRing{kick: s.kick}
	}
	s.rings.Store(&rings)
	return rings
}

// put appends a record and reports whether it fit. Called pinned to the
// ring's P, the only writer of its head.
func (r *spanRing) put(k spanKind, id, aux uint64, name string, lk *linkSpan) bool {
	h := atomic.LoadUint64(&r.head) // a plain MOV on amd64
	if h >= r.limit || h == r.kickAt {
		if !r.refresh(h) {
			return false
		}
	}
	e := &r.recs[h%spanRingSize]
	e.name = name // pointers: stored from Go, with the GC's write barrier
	e.link = lk
	if k != recEnd && spanGoidOff != 0 {
		// The goroutine (g never freed, so its fields are readable).
		g := goself.G()
		e.goid = goself.Word(g + spanGoidOff)
		e.gostart = 0
		if spanStartOff != 0 {
			e.gostart = goself.Word(g + spanStartOff)
		}
	}
	if spanFast && spanCommit(r, e, h, id, aux, k) {
		return true
	}
	r.commit(e, h, id, aux, k)
	return true
}

// refresh reads the ring's tail and reports whether a record fits at h.
// It wakes the drain goroutine when the ring is half full, and again every
// quarter ring while it stays so.
func (r *spanRing) refresh(h uint64) bool {
	t := r.tail.Load()
	if h-t >= spanRingSize {
		return false
	}
	r.limit = t + spanRingSize
	if h-t >= spanRingSize/2 {
		select {
		case r.kick <- struct{}{}:
		default:
		}
		r.kickAt = h + spanRingSize/4
	} else {
		r.kickAt = t + spanRingSize/2
	}
	return true
}

// commit stamps and publishes a record whose name is stored: the
// portable path of spanCommit, which also refreshes the ring's thread id.
//
//go:noinline
func (r *spanRing) commit(e *spanRec, h, id, aux uint64, k spanKind) {
	m := curM()
	if m == 0 || m != r.m {
		if m != 0 && spanProcidOff != 0 {
			r.tid = uint32(goself.Word(m + spanProcidOff)) // the runtime's copy of gettid
		} else {
			r.tid = uint32(gettid())
		}
		r.m = m
	}
	e.time = spanTick()
	e.id, e.aux, e.tid, e.kind = id, aux, r.tid, k
	publish(&r.head, h+1)
}

// startSpans enables the span API of a tracer of the calling process.
func (t *Tracer) startSpans() {
	if !t.self {
		return
	}
	n := runtime.GOMAXPROCS(0)
	checkGetMOnce.Do(checkGetM)
	spanTSCProbe.Do(func() {
		spanUseTSC = tscTrusted()
		spanFast = haveSpanCommit && spanUseTSC && mOK
		if l, err := goself.Self(); err == nil {
			spanGoidOff = l.GGoid
			if l.HasStartPC {
				spanStartOff = l.GStartPC
			}
			if l.HasProcid && mOK {
				spanProcidOff = l.MProcid
			}
			if l.HasLabels && l.LabelList {
				linkLabelsOff = l.GLabels
			}
		}
	})
	t.sp.t = t
	t.sp.nRings = n
	t.sp.heads = make([]uint64, n)
	t.sp.kick = make(chan struct{}, 1)
	if spanUseTSC {
		t.sp.clk.t, t.sp.clk.n = readClockPair()
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

// spansLost is the number of records dropped so far.
func (s *spanState) spansLost() uint64 {
	var lost uint64
	for _, r := range s.ringsNow() {
		lost += r.lost.Load()
	}
	return lost
}

// drainSpans encodes the records of every ring. The drain goroutine, Stop
// and producers that found their ring full call it; the tracer's lock
// makes them take turns.
func (t *Tracer) drainSpans() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.drainSpansLocked()
}

// drainSpansLocked is drainSpans with t.mu held. It frees a ring's slots
// as it encodes them (every spanFreeEvery records), so that a producer
// that found its ring full goes on while the drain does.
func (t *Tracer) drainSpansLocked() {
	if t.closed {
		return
	}
	s := &t.sp
	// Records stamped before now are in the rings (published within
	// the few instructions after their stamp): linked spans are known up
	// to here once they are drained.
	t.links.drained = spanNow()
	rings := s.ringsNow() // once: a producer may make them meanwhile
	for i, r := range rings {
		s.heads[i] = atomic.LoadUint64(&r.head)
	}
	// Every record below heads was stamped before this pair was read.
	var tm spanMap
	if spanUseTSC {
		tm = s.clk.advance()
	}
	for i, r := range rings {
		tail := r.tail.Load()
		head := s.heads[i]
		// A record's name stays referenced until its slot is reused: not
		// clearing it keeps the drain from writing to the ring's cache
		// lines, which the producer then owns again.
		for tail != head {
			end := min(head, tail+spanFreeEvery)
			for j := tail; j != end; j++ {
				e := &r.recs[j%spanRingSize]
				ts := e.time
				if spanUseTSC {
					ts = tm.ns(ts)
				}
				// Begin and end, nearly every record, without a call of
				// their own.
				switch {
				case e.link != nil:
					t.writeSpanRec(e, ts)
				case e.kind == recEnd:
					t.inChunkSpans++
					t.w.WriteSpanEnd(format.SpanEnd{Time: ts, Tid: e.tid, ID: e.id})
				case e.kind == recBegin && e.goid == 0:
					t.inChunkSpans++
					t.w.WriteSpanBegin(format.SpanBegin{Time: ts, Tid: e.tid, ID: e.id, Parent: e.aux, Name: t.spanName(e.name)})
				default:
					t.writeSpanRec(e, ts)
				}
			}
			r.tail.Store(end)
			tail = end
		}
	}
	if lost := s.spansLost(); lost > s.lostSeen {
		t.w.WriteLost(format.Lost{Time: spanNow(), Count: lost - s.lostSeen, Reason: format.LostBackpressure})
		s.lostSeen = lost
	}
}

// goStart returns the id of the one-frame stack of a goroutine's start
// function at pc (0: none), interned once per function. Called with t.mu
// held.
func (t *Tracer) goStart(pc uint64) uint64 {
	if pc == 0 {
		return 0
	}
	s := &t.sp
	if s.gostarts == nil || s.gen != t.stacks.resets {
		// New, or the stack table started afresh: its ids are not
		// defined in what follows.
		s.gostarts, s.gen = map[uint64]uint64{}, t.stacks.resets
	}
	id, ok := s.gostarts[pc]
	if !ok {
		id = t.internStack([]uint64{pc})
		s.gostarts[pc] = id
	}
	return id
}

// spanName returns the interned id of a record's name. Called with t.mu
// held.
func (t *Tracer) spanName(name string) uint64 {
	if len(name) == 0 {
		return t.internString(name)
	}
	p := unsafe.StringData(name)
	c := &t.sp.names[(uintptr(unsafe.Pointer(p))>>3)%spanNameCache]
	if c.id != 0 && unsafe.StringData(c.s) == p && len(c.s) == len(name) {
		return c.id
	}
	id := t.internString(name)
	c.s, c.id = name, id
	return id
}

func (t *Tracer) writeSpanRec(e *spanRec, ts int64) {
	t.inChunkSpans++
	switch e.kind {
	case recBegin:
		b := format.SpanBegin{Time: ts, Tid: e.tid, ID: e.id, Parent: e.aux, Name: t.spanName(e.name),
			Goroutine: e.goid, GoStart: t.goStart(e.gostart)}
		if e.link != nil {
			b.Link = e.link.link
			t.links.begin(e.link, e.tid, ts)
		}
		t.w.WriteSpanBegin(b)
	case recEnd:
		t.w.WriteSpanEnd(format.SpanEnd{Time: ts, Tid: e.tid, ID: e.id})
		if e.link != nil {
			t.links.end(e.link, ts)
		}
	case recMarker:
		t.w.WriteMarker(format.Marker{Time: ts, Tid: e.tid, Name: t.spanName(e.name), Goroutine: e.goid})
	case recCounter:
		t.w.WriteCounter(format.Counter{Time: ts, Name: t.spanName(e.name), Value: math.Float64frombits(e.aux)})
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
	rings := t.sp.use()
	p := procPin()
	if p >= len(rings) {
		procUnpin()
		return Span{}
	}
	r := rings[p]
	id := r.nextSeq()*uint64(len(rings)) + uint64(p) + 1
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
