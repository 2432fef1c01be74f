package tracer

import (
	"bytes"
	"context"
	"io"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/rawstack/rawstack/format"
)

// spanTracer is a tracer of the calling process with the span API on and
// no sampling back end: spans do not depend on one.
func spanTracer(t testing.TB, w io.Writer) *Tracer {
	t.Helper()
	tr, err := newTracer(Options{Streams: []io.Writer{w}})
	if err != nil {
		t.Fatal(err)
	}
	tr.startSpans()
	return tr
}

// stopSpanTracer stops a tracer made by spanTracer.
func stopSpanTracer(tr *Tracer) {
	tr.stopped.Store(true)
	tr.stopSpans()
	tr.mu.Lock()
	tr.final = true
	tr.w.Flush()
	tr.closed = true
	tr.mu.Unlock()
	tr.closeStreams()
}

type spanEvents struct {
	strings map[uint64]string
	begins  []format.SpanBegin
	ends    []format.SpanEnd
	markers []format.Marker
	counter []format.Counter
	lost    uint64
}

func readSpans(t *testing.T, b []byte) *spanEvents {
	t.Helper()
	r, err := format.NewReader(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	se := &spanEvents{strings: map[uint64]string{}}
	for {
		ev, err := r.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		switch ev.Kind {
		case format.KindString:
			se.strings[ev.String.ID] = ev.String.Value
		case format.KindSpanBegin:
			se.begins = append(se.begins, ev.SpanBegin)
		case format.KindSpanEnd:
			se.ends = append(se.ends, ev.SpanEnd)
		case format.KindMarker:
			se.markers = append(se.markers, ev.Marker)
		case format.KindCounter:
			se.counter = append(se.counter, ev.Counter)
		case format.KindLost:
			se.lost += ev.Lost.Count
		}
	}
	return se
}

// TestSpans records nested spans, markers and counters from several
// goroutines locked to their threads and checks every event: names,
// parents from the context, the thread ids the kernel gives those
// threads, and times that nest.
func TestSpans(t *testing.T) {
	var out bytes.Buffer
	tr := spanTracer(t, &out)
	const workers, rounds = 4, 300
	tids := make([]uint32, workers)
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			tids[w] = uint32(gettid())
			for i := 0; i < rounds; i++ {
				outer := tr.Span(context.Background(), "outer")
				ctx := outer.Context(context.Background())
				inner := tr.Span(ctx, "inner")
				tr.Marker("tick")
				tr.Counter("queue", float64(i))
				inner.End()
				outer.End()
			}
		}()
	}
	wg.Wait()
	stopSpanTracer(tr)
	se := readSpans(t, out.Bytes())
	if se.lost != 0 {
		t.Fatalf("%d records lost", se.lost)
	}
	if len(se.begins) != 2*workers*rounds || len(se.ends) != 2*workers*rounds || len(se.markers) != workers*rounds || len(se.counter) != workers*rounds {
		t.Fatalf("%d begins, %d ends, %d markers, %d counters", len(se.begins), len(se.ends), len(se.markers), len(se.counter))
	}
	known := map[uint32]bool{}
	for _, tid := range tids {
		known[tid] = true
	}
	if haveGetM && !mOK {
		t.Errorf("getm did not tell threads apart: every record asks the kernel for its thread id")
	}
	// Records come from per-P rings: a goroutine that moved to another
	// P between its outer and inner span may have the inner one in the
	// stream first (SPEC §5.4: readers that need order sort).
	begin := map[uint64]format.SpanBegin{}
	for _, b := range se.begins {
		if _, dup := begin[b.ID]; dup {
			t.Fatalf("span id %d twice", b.ID)
		}
		begin[b.ID] = b
	}
	for _, b := range se.begins {
		if runtime.GOOS == "linux" && !known[b.Tid] {
			t.Fatalf("span %d on thread %d, not one of the workers' %v", b.ID, b.Tid, tids)
		}
		switch se.strings[b.Name] {
		case "outer":
			if b.Parent != 0 {
				t.Errorf("outer span with parent %d", b.Parent)
			}
		case "inner":
			p, ok := begin[b.Parent]
			if !ok || se.strings[p.Name] != "outer" || p.Tid != b.Tid || p.Time > b.Time {
				t.Fatalf("inner span %+v: parent %+v", b, p)
			}
		default:
			t.Fatalf("span named %q", se.strings[b.Name])
		}
	}
	for _, e := range se.ends {
		b, ok := begin[e.ID]
		if !ok || e.Time < b.Time || e.Tid != b.Tid {
			t.Fatalf("end %+v of begin %+v", e, b)
		}
	}
	for _, m := range se.markers {
		if se.strings[m.Name] != "tick" || (runtime.GOOS == "linux" && !known[m.Tid]) {
			t.Fatalf("marker %+v", m)
		}
	}
	sum := 0.0
	for _, c := range se.counter {
		sum += c.Value
	}
	if want := float64(workers * rounds * (rounds - 1) / 2); sum != want || se.strings[se.counter[0].Name] != "queue" {
		t.Errorf("counter values sum to %v, want %v", sum, want)
	}
}

// TestSpanRingFull: a producer that finds its ring full, with no drain
// goroutine to empty it, encodes the rings itself: nothing is lost.
func TestSpanRingFull(t *testing.T) {
	var out bytes.Buffer
	tr := spanTracer(t, &out)
	close(tr.sp.drainq) // no drain goroutine: fill the ring
	<-tr.sp.drained
	tr.sp.drainq = nil
	tr.sp.kick = nil
	n := 3*len(tr.sp.use())*spanRingSize + 100
	for i := 0; i < n; i++ {
		tr.Marker("m")
	}
	if st := tr.Stats(); st.SpansLost != 0 {
		t.Errorf("stats: %d span records lost with the producer draining", st.SpansLost)
	}
	tr.drainSpans()
	stopSpanTracer(tr)
	se := readSpans(t, out.Bytes())
	if len(se.markers) != n || se.lost != 0 {
		t.Errorf("%d markers written and %d lost of %d", len(se.markers), se.lost, n)
	}
}

// TestSpanRingLost: when a full ring cannot be drained (here: the
// producer's draining is off), the dropped records are counted in a Lost
// event and in Stats.
func TestSpanRingLost(t *testing.T) {
	var out bytes.Buffer
	tr := spanTracer(t, &out)
	close(tr.sp.drainq)
	<-tr.sp.drained
	tr.sp.drainq = nil
	tr.sp.kick = nil
	tr.sp.noHelp = true
	runtime.LockOSThread()
	n := 0
	for i := 0; i < len(tr.sp.use())*spanRingSize+100; i++ {
		tr.Marker("m")
		n++
	}
	runtime.UnlockOSThread()
	st := tr.Stats()
	tr.drainSpans()
	stopSpanTracer(tr)
	se := readSpans(t, out.Bytes())
	if uint64(len(se.markers))+se.lost != uint64(n) || se.lost == 0 {
		t.Errorf("%d markers written and %d lost of %d", len(se.markers), se.lost, n)
	}
	if st.SpansLost != se.lost {
		t.Errorf("stats: %d span records lost, the stream says %d", st.SpansLost, se.lost)
	}
}

// TestSpanClock: records stamped with the TSC (where the kernel trusts
// it) land on the stream's monotonic clock: between the monotonic times
// read just before and after them.
func TestSpanClock(t *testing.T) {
	var out bytes.Buffer
	tr := spanTracer(t, &out)
	t.Logf("TSC stamps: %v", spanUseTSC)
	var before, after []int64
	for i := 0; i < 50; i++ {
		before = append(before, spanNow())
		tr.Marker("m")
		after = append(after, spanNow())
		if i%10 == 9 {
			tr.drainSpans()
			time.Sleep(time.Millisecond)
		}
	}
	stopSpanTracer(tr)
	se := readSpans(t, out.Bytes())
	if len(se.markers) != len(before) {
		t.Fatalf("%d markers of %d", len(se.markers), len(before))
	}
	// One drain interpolates between clock pairs read microseconds
	// apart: allow for the jitter of reading such a pair.
	const slack = 2000
	for i, m := range se.markers {
		if m.Time < before[i]-slack || m.Time > after[i]+slack {
			t.Errorf("marker %d at %d, not within [%d, %d]", i, m.Time, before[i], after[i])
		}
	}
}

// TestSpanOff: a nil or stopped tracer's span API does nothing.
func TestSpanOff(t *testing.T) {
	var tr *Tracer
	sp := tr.Span(context.Background(), "x")
	sp.End()
	tr.Marker("x")
	tr.Counter("x", 1)
	if sp.ID() != 0 || sp.Context(context.Background()) != context.Background() {
		t.Error("nil tracer returned a live span")
	}
	var out bytes.Buffer
	tr = spanTracer(t, &out)
	stopSpanTracer(tr)
	tr.Span(context.Background(), "after").End()
	if se := readSpans(t, out.Bytes()); len(se.begins) != 0 {
		t.Errorf("stopped tracer wrote %d spans", len(se.begins))
	}
}

func TestSpanAllocs(t *testing.T) {
	var out bytes.Buffer
	tr := spanTracer(t, &out)
	defer stopSpanTracer(tr)
	ctx := context.Background()
	if n := testing.AllocsPerRun(1000, func() {
		sp := tr.Span(ctx, "alloc")
		tr.Marker("m")
		tr.Counter("c", 1)
		sp.End()
	}); n != 0 {
		t.Errorf("span begin+end, marker and counter allocate %v times", n)
	}
	var off *Tracer
	if n := testing.AllocsPerRun(1000, func() { off.Span(ctx, "off").End() }); n != 0 {
		t.Errorf("nil tracer span allocates %v times", n)
	}
}

// BenchmarkSpan: the cost of one span begin + end on the traced
// goroutine while tracing. The rings are drained (encoded) between
// batches with the timer stopped, so no record is dropped (a dropped
// record is cheaper than a kept one) and the figure is the hot path
// alone; BenchmarkSpanDrain is the encoding cost paid by the drain
// goroutine.
func BenchmarkSpan(b *testing.B) {
	benchSpans(b, func(tr *Tracer, ctx context.Context) { tr.Span(ctx, "bench").End() })
}

// benchSpans runs span b.N times on a tracer, draining its rings while
// the timer is stopped.
func benchSpans(b *testing.B, span func(*Tracer, context.Context)) {
	tr := spanTracer(b, io.Discard)
	defer reportLost(b, tr)
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if i%(spanRingSize/4) == 0 {
			b.StopTimer()
			tr.drainSpans()
			b.StartTimer()
		}
		span(tr, ctx)
	}
}

// BenchmarkSpanLink is BenchmarkSpan for a span linked to an
// OpenTelemetry span (Tracer.SpanLink), and BenchmarkSpanLinkDrain
// BenchmarkSpanDrain for it.
func BenchmarkSpanLink(b *testing.B) {
	link := Link{TraceID: [16]byte{1}, SpanID: [8]byte{2}}
	benchSpans(b, func(tr *Tracer, ctx context.Context) { tr.SpanLink(ctx, "bench", link).End() })
}

func BenchmarkSpanLinkDrain(b *testing.B) {
	link := Link{TraceID: [16]byte{1}, SpanID: [8]byte{2}}
	benchDrain(b, func(tr *Tracer, ctx context.Context) { tr.SpanLink(ctx, "bench", link).End() })
}

// BenchmarkSpanDrain: encoding one span (begin and end records) into the
// stream, done by the tracer's drain goroutine.
func BenchmarkSpanDrain(b *testing.B) {
	benchDrain(b, func(tr *Tracer, ctx context.Context) { tr.Span(ctx, "bench").End() })
}

// benchDrain times the drain of b.N spans, made while the timer is
// stopped.
func benchDrain(b *testing.B, span func(*Tracer, context.Context)) {
	tr := spanTracer(b, io.Discard)
	defer reportLost(b, tr)
	ctx := context.Background()
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i += spanRingSize / 4 {
		b.StopTimer()
		for j := 0; j < spanRingSize/4 && i+j < b.N; j++ {
			span(tr, ctx)
		}
		b.StartTimer()
		tr.drainSpans()
	}
}

// BenchmarkSpanOff: the same on a nil tracer (tracing compiled in, off).
func BenchmarkSpanOff(b *testing.B) {
	var tr *Tracer
	ctx := context.Background()
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		tr.Span(ctx, "bench").End()
	}
}

func BenchmarkMarker(b *testing.B) {
	tr := spanTracer(b, io.Discard)
	defer reportLost(b, tr)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if i%(spanRingSize/2) == 0 {
			b.StopTimer()
			tr.drainSpans()
			b.StartTimer()
		}
		tr.Marker("bench")
	}
}

// reportLost stops the tracer and reports the records dropped because the
// drain goroutine fell behind: a cost figure is honest only when that is 0
// (a dropped record is cheaper than a kept one).
func reportLost(b *testing.B, tr *Tracer) {
	b.StopTimer()
	stopSpanTracer(tr)
	var lost uint64
	for _, r := range tr.sp.use() {
		lost += r.lost.Load()
	}
	b.ReportMetric(float64(lost)/float64(b.N), "lost/op")
}

// BenchmarkSpanClock: one read of the clock spans are stamped with; a span
// reads it twice, so on a VM whose clock source is not the TSC (kvm-clock)
// this is most of BenchmarkSpan.
func BenchmarkSpanClock(b *testing.B) {
	for i := 0; i < b.N; i++ {
		spanNow()
	}
}

// BenchmarkSpanSustained: spans in a tight loop with the drain goroutine
// encoding them meanwhile (nothing dropped: a full ring waits for it), so
// ns/op is what a loop of spans costs the traced goroutine.
func BenchmarkSpanSustained(b *testing.B) {
	tr := spanTracer(b, io.Discard)
	defer reportLost(b, tr)
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		tr.Span(ctx, "bench").End()
	}
}

// TestSpanMap: the drain's fixed-point mapping of TSC ticks to ns agrees
// with exact arithmetic, before the pair (a record stamped just before a
// drain's pair but published after its heads) and seconds after it.
func TestSpanMap(t *testing.T) {
	for _, slope := range []float64{0.3448, 0.5, 1, 2.5} {
		m := spanMap{t0: 1 << 40, n0: 5e12, mult: uint64(slope * (1 << 32))}
		exact := float64(m.mult) / (1 << 32)
		for _, d := range []int64{-3e6, -1, 0, 1, 7, 1e6, 3e9, 4e11} {
			want := float64(m.n0) + float64(d)*exact
			if got := float64(m.ns(m.t0 + d)); got < want-1 || got > want+1 {
				t.Errorf("slope %v, %d ticks from the pair: %v ns, want %v", slope, d, got, want)
			}
		}
	}
}

// TestIsBackground: the parent lookup skips context.Background() only.
func TestIsBackground(t *testing.T) {
	type key struct{}
	if !isBackground(context.Background()) {
		t.Error("context.Background() not recognised")
	}
	for _, ctx := range []context.Context{context.TODO(), context.WithValue(context.Background(), key{}, 1), (&Span{}).Context(context.TODO())} {
		if isBackground(ctx) {
			t.Errorf("%v taken for context.Background()", ctx)
		}
	}
}

// TestSpanFastPath: where the TSC is the clock and getm reads the M, spans
// are stamped by spanCommit (linux/amd64 without the race detector).
func TestSpanFastPath(t *testing.T) {
	var out bytes.Buffer
	tr := spanTracer(t, &out)
	defer stopSpanTracer(tr)
	t.Logf("TSC %v, getm %v, spanCommit %v: fast path %v", spanUseTSC, mOK, haveSpanCommit, spanFast)
	if want := haveSpanCommit && spanUseTSC && mOK; spanFast != want {
		t.Errorf("fast path %v, want %v", spanFast, want)
	}
	if haveSpanCommit && spanUseTSC && !mOK {
		t.Errorf("getm does not tell threads apart: spans take the portable path")
	}
}
