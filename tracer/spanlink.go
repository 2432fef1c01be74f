package tracer

import (
	"context"
	"sync"
	"sync/atomic"

	"github.com/rawstack/rawstack/format"
)

// Link names an OpenTelemetry span: its trace id and span id. Package
// tracer/otelspan opens tracer spans linked to the span a context.Context
// carries; this package does not import OpenTelemetry.
type Link = format.SpanLink

// linkKeep is how long a linked span is remembered after it ended:
// samples are read from the kernel's buffers after they were taken, up
// to the back end's wake-up interval later (tens of milliseconds).
const linkKeep = 5e9 // ns

// linkState remembers the linked spans of each thread, so that the
// samples taken in them carry their link (format.Sample.Link).
type linkState struct {
	n     atomic.Int32 // spans remembered; 0: samples skip the lock
	mu    sync.Mutex
	byTid map[uint32][]*linkSpan
	open  map[uint64]*linkSpan // by span id
}

type linkSpan struct {
	id         uint64
	tid        uint32
	begin, end int64 // end 0: open
	link       Link
}

// SpanLink opens a span like [Tracer.Span], linked to the OpenTelemetry
// span link names: the samples taken on the calling goroutine's thread
// while it is open (and no span opened inside it is linked to another)
// carry link, which `convert --to otlp` and the OTLP stream write as the
// sample's link and pprof as its trace_id and span_id labels. Unlike
// Span, it takes a lock and asks the OS for the thread id (about a
// microsecond). A goroutine that may move to another thread while the
// span is open should call runtime.LockOSThread first for its samples to
// follow it. A zero link opens a plain span.
func (t *Tracer) SpanLink(ctx context.Context, name string, link Link) Span {
	// The link's times hold the span's: its begin before the span's
	// begin record, its end after the end record (Span.End).
	now := spanNow()
	sp := t.Span(ctx, name)
	if sp.t == nil || link.IsZero() {
		return sp
	}
	t.links.begin(sp.id, uint32(gettid()), now, link)
	sp.linked = true
	return sp
}

func (l *linkState) begin(id uint64, tid uint32, now int64, link Link) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.byTid == nil {
		l.byTid, l.open = map[uint32][]*linkSpan{}, map[uint64]*linkSpan{}
	}
	s := &linkSpan{id: id, tid: tid, begin: now, link: link}
	l.byTid[tid] = append(l.byTid[tid], s)
	l.open[id] = s
	l.n.Add(1)
}

func (l *linkState) end(id uint64, now int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	s := l.open[id]
	if s == nil {
		return
	}
	delete(l.open, id)
	s.end = now
	l.prune(s.tid, now)
}

// prune forgets the spans of tid that ended more than linkKeep before now.
func (l *linkState) prune(tid uint32, now int64) {
	ss := l.byTid[tid]
	kept := ss[:0]
	for _, s := range ss {
		if s.end == 0 || now-s.end < linkKeep {
			kept = append(kept, s)
		}
	}
	clear(ss[len(kept):])
	l.n.Add(int32(len(kept) - len(ss)))
	if len(kept) == 0 {
		delete(l.byTid, tid)
	} else {
		l.byTid[tid] = kept
	}
}

// at returns the link of the innermost linked span open on tid at time
// t, if any.
func (l *linkState) at(tid uint32, t int64) Link {
	if l.n.Load() == 0 {
		return Link{}
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	var best *linkSpan
	for _, s := range l.byTid[tid] {
		if s.begin <= t && (s.end == 0 || t < s.end) && (best == nil || s.begin >= best.begin) {
			best = s
		}
	}
	if len(l.byTid[tid]) > 0 {
		l.prune(tid, t)
	}
	if best == nil {
		return Link{}
	}
	return best.link
}
