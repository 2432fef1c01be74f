package tracer

import (
	"cmp"
	"context"
	"slices"
	"sync/atomic"
	"unsafe"

	"github.com/rawstack/rawstack/format"
	"github.com/rawstack/rawstack/internal/goself"
)

// Link names an OpenTelemetry span: its trace id and span id. Package
// tracer/otelspan opens tracer spans linked to the span a context.Context
// carries; this package does not import OpenTelemetry.
type Link = format.SpanLink

// Linked spans follow goroutines
//
// In a Go program the goroutine, not the OS thread, is the unit of work:
// the scheduler moves a goroutine to another thread at every Gosched,
// channel operation, system call or preemption. A linked span covers the
// samples of the goroutine that opened it, on whatever thread it runs,
// from its begin to its end:
//
//   - Each sample carries the g register (R14 on amd64, X28 on arm64:
//     platform.Config.SampleG), which in Go code holds the running
//     goroutine's g; the span's begin record carries the g of the
//     goroutine that opened it (package internal/goself). A sample whose
//     g opened linked spans gets the link of the innermost one open at
//     the sample's time: nested spans, the innermost linked span wins.
//   - A goroutine started inside a linked span inherits its link, as it
//     inherits pprof labels (runtime/pprof.Do: the runtime copies the
//     creating goroutine's labels to the new one): the span sets the
//     goroutine's labels pointer to itself, a value that runtime/pprof
//     and the runtime read as the labels the goroutine had, and a sample
//     of another goroutine whose labels point at a linked span gets its
//     link, or that of the span it was opened in, while it is open. Like
//     pprof labels it is inherited when the goroutine starts, from the
//     starting goroutine, not through a context.Context; unlike them it
//     ends when the span ends.
//   - A span ended on another goroutine covers the samples of the
//     goroutine that opened it until End, wherever End is called.
//     End restores the labels only of the goroutine that calls it, when
//     they still point at the span.
//   - Non-Go code keeps thread semantics. C code called through cgo runs
//     on the calling goroutine's thread and keeps its g register
//     (callee-saved in C): its samples follow the goroutine. A program
//     whose g the tracer cannot read (other than 64-bit amd64 and arm64)
//     links the samples of the thread a span began on, as before
//     goroutines were followed.
//
// Opening a linked span takes no lock and no system call: the span's
// record (with its link) goes into the P's ring like any span's, and the
// tracer learns of it when it drains the rings, which it does before it
// looks up the link of a sample taken after its last drain.

// linkKeep is how long a linked span is remembered after it ended:
// samples are read from the kernel's buffers after they were taken, up
// to the back end's wake-up interval later (at most a second). At most
// linkKeepMax ended spans are remembered: a delayed sample in a span
// ended more than that many spans ago gets no link.
const (
	linkKeep    = 2e9 // ns
	linkKeepMax = 1 << 16
)

// linkSpan is a linked span as its goroutine holds it. Its first field
// makes it a pprof label set (goself.Layout.LabelList): the goroutine's
// labels as they were when it opened.
type linkSpan struct {
	labels []struct{ Key, Value string }
	prev   unsafe.Pointer // the goroutine's labels pointer before (restored at End)
	link   Link
	g      uintptr // the goroutine that opened it (0: not known here)
	goid   uint64
	// Set when drained, under the tracer's lock: its slot in
	// linkState.recs (slot 0: not drained yet) and the slot's
	// generation; the end's time when drained before the begin.
	slot, gen uint32
	end       int64
}

// linkRec is what the drain keeps of a linked span, in a slot of
// linkState.recs: plain values, no pointers, so that filing a span
// costs the garbage collector nothing (its write barriers were most of
// the drain's cost while a service allocates).
type linkRec struct {
	addr       uintptr // the linkSpan's address: what goroutines' labels hold
	g          uintptr
	goid       uint64
	link       Link
	begin, end int64 // end 0: open
	key        uint64
	// outer is the slot of the span of its goroutine it was opened in,
	// valid while that slot's gen is outerGen.
	outer, outerGen, gen uint32
	gone                 bool // forgotten: its slot is freed when gl drops it
}

// linkLabelsOff is g.labels' offset when linked spans may stand as the
// goroutine's labels (goself.Layout: found, and laid out as a label
// list); 0: they do not, and goroutines do not inherit links.
var linkLabelsOff uintptr

// linkState remembers the linked spans drained and not yet forgotten,
// so that the samples taken in them carry their link (format.Sample.Link).
// Everything but used is under the tracer's lock.
type linkState struct {
	used    atomic.Bool // a linked span was opened: samples look links up
	recs    []linkRec   // slots; 0 is not used
	free    []uint32    // free slots
	of      map[uint64]*goLinks
	ended   []uint32 // slots in end order, from endHead on, to forget
	endHead int
	drained int64 // the rings were drained of every record stamped before this (ns)
	buf     [16]byte
}

// goLinks are the linked spans of one goroutine (keyed by its g), or of
// one thread where the g is not known (tid | 1<<63), as slots.
type goLinks struct {
	spans []uint32 // by begin from sorted on (see sort)
	// spans[:sorted] are in begin order, and begin no later than any
	// span after them.
	sorted int
	open   []uint32 // open now, innermost last
	gone   int      // spans forgotten but still in spans
}

// SpanLink opens a span like [Tracer.Span], linked to the OpenTelemetry
// span link names: the samples of the calling goroutine, on whatever
// thread it runs, taken while the span is open (and no span opened
// inside it is linked to another) carry link, which `convert --to otlp`
// and the OTLP stream write as the sample's link and pprof as its
// trace_id and span_id labels. Goroutines started inside it inherit it
// while it is open, as they inherit pprof labels (see the package's
// notes on linked spans in spanlink.go). Like Span it takes no lock and
// makes no system call; it allocates the link's record (96 bytes).
// A zero link opens a plain span.
func (t *Tracer) SpanLink(ctx context.Context, name string, link Link) Span {
	if t == nil || !t.sp.on.Load() {
		return Span{}
	}
	if link.IsZero() {
		return t.span(ctx, name)
	}
	if !t.links.used.Load() {
		t.links.used.Store(true)
	}
	lk := &linkSpan{link: link}
	if spanGoidOff != 0 {
		lk.g = goself.G()
		lk.goid = goself.Word(lk.g + spanGoidOff)
	}
	if linkLabelsOff != 0 {
		lk.prev = goself.Labels()
		if lk.prev != nil {
			lk.labels = *(*[]struct{ Key, Value string })(lk.prev)
		}
		goself.SetLabels(unsafe.Pointer(lk))
	}
	return t.spanOpen(ctx, name, lk)
}

// restoreLabels gives the calling goroutine its labels back, if they
// still point at the span (it opened it, or inherited it).
func (lk *linkSpan) restoreLabels() {
	if linkLabelsOff != 0 && goself.Labels() == unsafe.Pointer(lk) {
		goself.SetLabels(lk.prev)
	}
}

// begin files a drained span's begin. A span's begin and end may sit in
// two Ps' rings (its goroutine moved), so its end can be drained first.
func (l *linkState) begin(lk *linkSpan, tid uint32, ts int64) {
	if l.of == nil {
		l.of, l.recs = map[uint64]*goLinks{}, make([]linkRec, 1, 1024)
	}
	key := uint64(lk.g)
	if lk.g == 0 {
		key = uint64(tid) | 1<<63
	}
	gl := l.of[key]
	if gl == nil {
		gl = &goLinks{}
		l.of[key] = gl
	}
	var slot uint32
	if n := len(l.free); n > 0 {
		slot, l.free = l.free[n-1], l.free[:n-1]
	} else {
		slot = uint32(len(l.recs))
		l.recs = append(l.recs, linkRec{})
	}
	r := &l.recs[slot]
	*r = linkRec{addr: uintptr(unsafe.Pointer(lk)), g: lk.g, goid: lk.goid, link: lk.link, begin: ts, key: key, gen: r.gen + 1}
	if r.gen == 0 { // wrapped: 0 marks nothing
		r.gen = 1
	}
	lk.slot, lk.gen = slot, r.gen
	if n := len(gl.open); n > 0 {
		r.outer = gl.open[n-1]
		r.outerGen = l.recs[r.outer].gen
	}
	// By begin, at the next lookup: records of one goroutine come from
	// several rings, each drained in turn, so a ring's begins may precede
	// those just filed from another. Placing each at once cost a scan and
	// a move of the spans filed since (thousands per drain, on a
	// goroutine that moves between Ps).
	if n := len(gl.spans); gl.sorted == n && (n == 0 || l.recs[gl.spans[n-1]].begin <= ts) {
		gl.sorted++
	} else if gl.sorted > 0 && l.recs[gl.spans[gl.sorted-1]].begin > ts {
		gl.sorted, _ = slices.BinarySearchFunc(gl.spans[:gl.sorted], ts+1, l.byBegin)
	}
	gl.spans = append(gl.spans, slot)
	if lk.end != 0 {
		r.end = max(lk.end, ts+1)
		l.forgetLater(slot)
	} else {
		gl.open = append(gl.open, slot)
	}
}

// end files a drained span's end.
func (l *linkState) end(lk *linkSpan, ts int64) {
	if lk.slot == 0 || l.recs[lk.slot].gen != lk.gen {
		lk.end = ts // its begin comes later
		return
	}
	r := &l.recs[lk.slot]
	if r.end != 0 {
		return // ended twice
	}
	r.end = max(ts, r.begin+1)
	if gl := l.of[r.key]; gl != nil {
		for i := len(gl.open) - 1; i >= 0; i-- {
			if gl.open[i] == lk.slot {
				gl.open = slices.Delete(gl.open, i, i+1)
				break
			}
		}
	}
	l.forgetLater(lk.slot)
}

// forgetLater queues an ended span, and forgets the spans that ended
// linkKeep before it, or linkKeepMax spans before: their slots are free
// again.
func (l *linkState) forgetLater(slot uint32) {
	l.ended = append(l.ended, slot)
	now := l.recs[slot].end
	for l.endHead < len(l.ended) {
		old := l.ended[l.endHead]
		r := &l.recs[old]
		if now-r.end < linkKeep && len(l.ended)-l.endHead <= linkKeepMax {
			break
		}
		l.endHead++
		r.gone = true
		if gl := l.of[r.key]; gl != nil {
			// Out of gl at once when first (it is, but for a goroutine's
			// long span that others nest in, or records drained out of
			// order), else when half of gl is forgotten.
			gl.gone++
			for len(gl.spans) > 0 && l.recs[gl.spans[0]].gone {
				l.release(gl.spans[0])
				gl.spans = gl.spans[1:]
				gl.sorted = max(gl.sorted-1, 0)
				gl.gone--
			}
			if gl.gone > 64 && gl.gone > len(gl.spans)/2 {
				l.sort(gl) // deleting keeps the order
				gl.spans = slices.DeleteFunc(gl.spans, func(s uint32) bool {
					if l.recs[s].gone {
						l.release(s)
						return true
					}
					return false
				})
				gl.gone, gl.sorted = 0, len(gl.spans)
			}
			if len(gl.spans) == 0 && len(gl.open) == 0 {
				delete(l.of, r.key)
			}
		} else {
			l.release(old)
		}
	}
	if l.endHead > len(l.ended)/2 && l.endHead > 1024 {
		l.ended = append(l.ended[:0], l.ended[l.endHead:]...)
		l.endHead = 0
	}
}

// release frees a forgotten span's slot.
func (l *linkState) release(slot uint32) {
	l.recs[slot].gen++ // references to it are stale now
	l.free = append(l.free, slot)
}

// at returns the slot of the innermost span of gl open at t (0: none):
// the last one begun by t, or, when that one had ended, the one it was
// opened in.
func (l *linkState) at(gl *goLinks, t int64) uint32 {
	l.sort(gl)
	i, _ := slices.BinarySearchFunc(gl.spans, t+1, l.byBegin)
	if i == 0 {
		return 0
	}
	return l.openFrom(gl.spans[i-1], t)
}

// sort puts gl.spans in begin order: it sorts those filed out of order
// since the last sort, all of which begin after the ones before them.
func (l *linkState) sort(gl *goLinks) {
	if gl.sorted < len(gl.spans) {
		slices.SortFunc(gl.spans[gl.sorted:], func(a, b uint32) int { return cmp.Compare(l.recs[a].begin, l.recs[b].begin) })
		gl.sorted = len(gl.spans)
	}
}

func (l *linkState) byBegin(s uint32, t int64) int { return cmp.Compare(l.recs[s].begin, t) }

// openFrom returns the first of slot and the spans it was opened in
// (its outer spans) that is open at t, 0 if none.
func (l *linkState) openFrom(slot uint32, t int64) uint32 {
	for n := 0; slot != 0 && n < 64; n++ {
		r := &l.recs[slot]
		if r.begin <= t && (r.end == 0 || t < r.end) && !r.gone {
			return slot
		}
		if l.recs[r.outer].gen != r.outerGen {
			return 0
		}
		slot = r.outer
	}
	return 0
}

// linkOf returns the link of a sample taken at time t on thread tid
// whose g register held g, and the goroutine it found it through (0: not
// known). Called with the tracer's lock held, after the rings were
// drained of what was recorded before t.
func (t *Tracer) linkOf(g uint64, tid uint32, at int64) (Link, uint64) {
	l := &t.links
	if l.of == nil {
		return Link{}, 0
	}
	if spanGoidOff == 0 {
		// The g is not known here: the thread's spans.
		if gl := l.of[uint64(tid)|1<<63]; gl != nil {
			if s := l.at(gl, at); s != 0 {
				return l.recs[s].link, 0
			}
		}
		return Link{}, 0
	}
	if g == 0 {
		return Link{}, 0
	}
	if gl := l.of[g]; gl != nil {
		if s := l.at(gl, at); s != 0 {
			return l.recs[s].link, l.recs[s].goid
		}
	}
	if linkLabelsOff == 0 {
		return Link{}, 0
	}
	// Another goroutine (or not a g at all: the register of non-Go
	// code): its labels, read safely, may point at a linked span it
	// inherited, which is a span of the goroutine that opened it, whose
	// g the span holds. Addresses read are compared, never followed.
	if !readSelf(uintptr(g)+spanGoidOff, l.buf[:8]) || !readSelf(uintptr(g)+linkLabelsOff, l.buf[8:]) {
		return Link{}, 0
	}
	goid := le64(l.buf[:8])
	p := uintptr(le64(l.buf[8:]))
	if p == 0 || !readSelf(p+unsafe.Offsetof(linkSpan{}.g), l.buf[8:]) {
		return Link{}, 0
	}
	gl := l.of[le64(l.buf[8:])]
	if gl == nil {
		return Link{}, 0
	}
	for i := len(gl.spans) - 1; i >= 0; i-- {
		if l.recs[gl.spans[i]].addr == p {
			// It, or the span it was opened in, while open.
			if s := l.openFrom(gl.spans[i], at); s != 0 {
				return l.recs[s].link, goid
			}
			break
		}
	}
	return Link{}, 0
}

func le64(b []byte) uint64 {
	_ = b[7]
	return uint64(b[0]) | uint64(b[1])<<8 | uint64(b[2])<<16 | uint64(b[3])<<24 |
		uint64(b[4])<<32 | uint64(b[5])<<40 | uint64(b[6])<<48 | uint64(b[7])<<56
}
