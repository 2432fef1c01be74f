package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"runtime/trace"
	"sort"
	"sync"
	"time"

	"github.com/rawstack/rawstack/format"
	"github.com/rawstack/rawstack/tracer"
)

// The spans scenario (issue 25): sustained span begin+end in a tight loop,
// recorded to a file, against runtime/trace regions (trace.StartRegion +
// End, the runtime's own span) recorded to a file in the same process.
// Runs alternate rawstack, runtime/trace, rawstack, ... and each figure
// is the median of the runs. Recorded is counted by reading the trace
// file back (SpanBegin + SpanEnd events over the 2 per span issued, as
// rawstack info counts them); the rawstack tracer's Stats().SpansLost must
// agree with what the file is missing. runtime/trace never drops an
// event (its writer blocks the traced goroutine instead), so its side is
// not counted.
//
// Two shapes: one goroutine, and four goroutines on GOMAXPROCS=2 (more
// producers than cores: the tracer's drain goroutine gets no CPU of its
// own, so the producers pay for the encoding). ns/span is wall time of
// the loop over the spans issued, so it includes what the producers pay
// for encoding but not the drain goroutine's work on another core.
func init() {
	register(&scenario{name: "spans", order: 250, run: runSpans})
}

const spansName = "bench-span"

type spansRun struct {
	nsPerSpan  float64
	cpuPerSpan float64 // process CPU over the loop and Stop, per span
	recorded   float64 // share of begin+end records in the file
	lost       uint64  // Stats().SpansLost + SpansDropped
}

func runSpans(cfg *config) ([]row, error) {
	pairs, n := 11, 1_000_000
	if cfg.short {
		pairs, n = 3, 200_000
	}
	var rows []row
	for _, workers := range []int{1, 4} {
		shape := "1 goroutine"
		if workers > 1 {
			shape = fmt.Sprintf("%d goroutines, GOMAXPROCS=2", workers)
		}
		prev := runtime.GOMAXPROCS(0)
		if workers > 1 {
			runtime.GOMAXPROCS(2)
		}
		var raw, rt, rawCPU, rtCPU []float64
		var rec []float64
		var lost uint64
		for i := 0; i < pairs; i++ {
			r, err := spansRawstack(cfg, workers, n)
			if err != nil {
				runtime.GOMAXPROCS(prev)
				return nil, err
			}
			raw, rec, lost = append(raw, r.nsPerSpan), append(rec, r.recorded), lost+r.lost
			rawCPU = append(rawCPU, r.cpuPerSpan)
			ns, cpu, err := spansRuntimeTrace(cfg, workers, n)
			if err != nil {
				runtime.GOMAXPROCS(prev)
				return nil, err
			}
			rt, rtCPU = append(rt, ns), append(rtCPU, cpu)
			fmt.Fprintf(cfg.logger, "  spans %s pair %d: rawstack %.1f ns/span, CPU %.1f (%.3f%% recorded), runtime/trace %.1f ns/span, CPU %.1f (load %s)\n",
				shape, i+1, r.nsPerSpan, r.cpuPerSpan, 100*r.recorded, ns, cpu, spansLoad())
		}
		runtime.GOMAXPROCS(prev)
		ratios := make([]float64, len(raw))
		for i := range raw {
			ratios[i] = rt[i] / raw[i]
		}
		minRec := rec[0]
		for _, v := range rec {
			minRec = min(minRec, v)
		}
		note := fmt.Sprintf("%d spans/run, median of %d alternating pairs; median pair ratio %.2fx; load %s; goal >= 8x cheaper", n, pairs, spansMedian(ratios), spansLoad())
		rows = append(rows,
			row{Scenario: "spans", Metric: "ns per span begin+end, " + shape, Rawstack: spansMedian(raw), Peer: "runtime/trace region", PeerVal: spansMedian(rt), Better: "lower", Note: note},
			row{Scenario: "spans", Metric: "CPU ns per span (process: loop, drain, writer, Stop), " + shape, Rawstack: spansMedian(rawCPU), Peer: "runtime/trace region", PeerVal: spansMedian(rtCPU), Better: "lower",
				Note: "robust where the machine is loaded: wall times are not"},
			row{Scenario: "spans", Metric: "% of span records in the file, " + shape, Rawstack: 100 * spansMedian(rec),
				Note: fmt.Sprintf("worst run %.3f%%; Stats lost+dropped over all runs %d; goal >= 99%%", 100*minRec, lost)},
		)
	}
	// The traced goroutine's cost in bursts, and the clock's floor, side
	// by side with regions in bursts.
	var bRaw, bRT, bRatio, bRec []float64
	var tsc []tscCost
	for i := 0; i < pairs; i++ {
		if haveTSC {
			tsc = append(tsc, spansTSC(n))
		}
		r, err := spansRawstackWith(cfg, 1, n, func(tr *tracer.Tracer) time.Duration { return spansBursts(n, tr) })
		if err != nil {
			return nil, err
		}
		ns, _, err := spansRuntimeTraceWith(cfg, 1, n, func(tr *tracer.Tracer) time.Duration { return spansBursts(n, tr) })
		if err != nil {
			return nil, err
		}
		bRaw, bRT, bRatio, bRec = append(bRaw, r.nsPerSpan), append(bRT, ns), append(bRatio, ns/r.nsPerSpan), append(bRec, r.recorded)
		fmt.Fprintf(cfg.logger, "  spans in bursts of %d pair %d: rawstack %.1f ns/span (%.3f%% recorded), runtime/trace %.1f ns/span (load %s)\n",
			spansBurst, i+1, r.nsPerSpan, 100*r.recorded, ns, spansLoad())
	}
	rows = append(rows, row{Scenario: "spans", Metric: fmt.Sprintf("ns per span begin+end, 1 goroutine, bursts of %d", spansBurst), Rawstack: spansMedian(bRaw), Peer: "runtime/trace region", PeerVal: spansMedian(bRT), Better: "lower",
		Note: fmt.Sprintf("the traced goroutine's cost (median burst), the drain working in the pauses; median pair ratio %.2fx of %d; %.3f%% recorded (median); load %s", spansMedian(bRatio), pairs, 100*spansMedian(bRec), spansLoad())})
	if haveTSC {
		get := func(f func(tscCost) float64) float64 {
			v := make([]float64, len(tsc))
			for i, c := range tsc {
				v[i] = f(c)
			}
			return spansMedian(v)
		}
		floor := 2 * get(func(c tscCost) float64 { return c.rdtsc })
		rows = append(rows, row{Scenario: "spans", Metric: "ns per two TSC reads (RDTSC back to back): the clock floor of a begin+end", Rawstack: floor, Peer: "runtime/trace region, bursts", PeerVal: spansMedian(bRT), Better: "lower",
			Note: fmt.Sprintf("a span API that stamps begin and end with this counter is at most %.1fx cheaper than a region here; one read: RDTSC %.1f, RDTSCP %.1f, LFENCE;RDTSC %.1f, RDTSC in a call %.1f, the call alone %.1f ns; median of %d",
				spansMedian(bRT)/floor, floor/2, get(func(c tscCost) float64 { return c.rdtscp }), get(func(c tscCost) float64 { return c.lfence }),
				get(func(c tscCost) float64 { return c.call }), get(func(c tscCost) float64 { return c.empty }), len(tsc))})
	}
	return rows, nil
}

// spansBurst is the size of the bursts of spansBursts.
const spansBurst = 1000

// spansBursts issues n spans from one goroutine in bursts of spansBurst,
// a pause after each, and returns n times the median burst's time per
// span: what a span costs the goroutine that opens it when the drain has
// the pauses to work in (a program that does something else between its
// spans), rather than a tight loop's pace, which the drain sets. The
// median leaves out the bursts that another process's time slice fell
// into on a loaded machine; both sides are measured the same way.
func spansBursts(n int, tr *tracer.Tracer) time.Duration {
	ctx := context.Background()
	var per []float64
	for done := 0; done < n; done += spansBurst {
		start := time.Now()
		spansN(tr, ctx, spansBurst)
		per = append(per, float64(time.Since(start).Nanoseconds())/spansBurst)
		time.Sleep(100 * time.Microsecond)
	}
	return time.Duration(spansMedian(per) * float64(n))
}

// tscCost is the cost in ns of one time-stamp counter read: RDTSC back to
// back (the floor), RDTSCP, LFENCE;RDTSC, RDTSC in a call of its own, and
// such a call without the read (time.Now's own cost, ~20-40 ns, is
// spread over each burst of 1000).
type tscCost struct{ rdtsc, rdtscp, lfence, call, empty float64 }

var spansSink int64

// spansTSC measures each flavour over n reads, timed in bursts of 1000
// and reported as the median burst: on a loaded machine a loop that runs
// for milliseconds is descheduled, and that time is not the counter's.
func spansTSC(n int) tscCost {
	const burst = 1000
	per := func(f func(k int)) float64 {
		var ds []float64
		for done := 0; done < n; done += burst {
			start := time.Now()
			f(burst)
			ds = append(ds, float64(time.Since(start).Nanoseconds())/burst)
		}
		return spansMedian(ds)
	}
	var sink int64
	c := tscCost{
		rdtsc:  per(tscLoop),
		rdtscp: per(tscpLoop),
		lfence: per(lfenceTscLoop),
		call: per(func(k int) {
			for i := 0; i < k; i++ {
				sink += tscCall()
			}
		}),
		empty: per(func(k int) {
			for i := 0; i < k; i++ {
				sink += emptyCall()
			}
		}),
	}
	spansSink = sink
	return c
}

// spansN opens and ends k spans named spansName on ctx: rawstack spans
// with tr, runtime/trace regions when tr is nil. The calls are direct, in
// a loop of their own for each side: a call through a func value would
// add a nanosecond or two to both.
func spansN(tr *tracer.Tracer, ctx context.Context, k int) {
	if tr != nil {
		for i := 0; i < k; i++ {
			tr.Span(ctx, spansName).End()
		}
		return
	}
	for i := 0; i < k; i++ {
		trace.StartRegion(ctx, spansName).End()
	}
}

// spansLoop issues n spans over workers goroutines (see spansN) and
// returns the wall time.
func spansLoop(workers, n int, tr *tracer.Tracer) time.Duration {
	ctx := context.Background()
	var wg sync.WaitGroup
	start := time.Now()
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			spansN(tr, ctx, n/workers)
		}()
	}
	wg.Wait()
	return time.Since(start)
}

func spansRawstack(cfg *config, workers, n int) (spansRun, error) {
	return spansRawstackWith(cfg, workers, n, func(tr *tracer.Tracer) time.Duration { return spansLoop(workers, n, tr) })
}

// spansRawstackWith records the spans that loop issues (n over workers
// goroutines) with a rawstack tracer.
func spansRawstackWith(cfg *config, workers, n int, loop func(tr *tracer.Tracer) time.Duration) (spansRun, error) {
	path := filepath.Join(cfg.work, "spans.rst")
	f, err := os.Create(path)
	if err != nil {
		return spansRun{}, err
	}
	defer f.Close()
	bw := bufio.NewWriterSize(f, 1<<20)
	tr, err := tracer.Start(context.Background(), tracer.Options{Frequency: 1, Streams: []io.Writer{bw}})
	if err != nil {
		return spansRun{}, fmt.Errorf("tracer.Start: %w", err)
	}
	cpu0 := spansCPU()
	d := loop(tr)
	if err := tr.Stop(); err != nil {
		return spansRun{}, fmt.Errorf("tracer.Stop: %w", err)
	}
	cpu := spansCPU() - cpu0
	st := tr.Stats()
	if err := bw.Flush(); err != nil {
		return spansRun{}, err
	}
	issued := 2 * (n / workers) * workers
	got, err := spansInFile(path)
	if err != nil {
		return spansRun{}, err
	}
	if missing := uint64(issued - got); missing != st.SpansLost+st.SpansDropped {
		fmt.Fprintf(cfg.logger, "  spans: the file misses %d records, Stats says %d lost + %d dropped\n", missing, st.SpansLost, st.SpansDropped)
	}
	return spansRun{
		nsPerSpan:  float64(d.Nanoseconds()) / float64(issued/2),
		cpuPerSpan: float64(cpu.Nanoseconds()) / float64(issued/2),
		recorded:   float64(got) / float64(issued),
		lost:       st.SpansLost + st.SpansDropped,
	}, nil
}

// spansInFile counts the SpanBegin and SpanEnd events of the name
// spansName in a rawstack trace.
func spansInFile(path string) (int, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	r, err := format.NewReader(bufio.NewReaderSize(f, 1<<20))
	if err != nil {
		return 0, fmt.Errorf("%s: %w", path, err)
	}
	// Records come from per-P rings: the end of a span whose goroutine
	// moved to another P may precede its begin, so ends are matched at
	// the end of the file.
	var name uint64
	begins := map[uint64]bool{}
	var ends []uint64
	for {
		ev, err := r.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return 0, fmt.Errorf("%s: %w", path, err)
		}
		switch ev.Kind {
		case format.KindString:
			if ev.String.Value == spansName {
				name = ev.String.ID
			}
		case format.KindSpanBegin:
			if ev.SpanBegin.Name == name && name != 0 {
				begins[ev.SpanBegin.ID] = true
			}
		case format.KindSpanEnd:
			ends = append(ends, ev.SpanEnd.ID)
		}
	}
	n := len(begins)
	for _, id := range ends {
		if begins[id] {
			n++
		}
	}
	return n, nil
}

// spansRuntimeTrace returns the wall and process CPU ns per region.
func spansRuntimeTrace(cfg *config, workers, n int) (float64, float64, error) {
	return spansRuntimeTraceWith(cfg, workers, n, func(tr *tracer.Tracer) time.Duration { return spansLoop(workers, n, tr) })
}

func spansRuntimeTraceWith(cfg *config, workers, n int, loop func(tr *tracer.Tracer) time.Duration) (float64, float64, error) {
	f, err := os.Create(filepath.Join(cfg.work, "spans.trace"))
	if err != nil {
		return 0, 0, err
	}
	defer f.Close()
	bw := bufio.NewWriterSize(f, 1<<20)
	if err := trace.Start(bw); err != nil {
		return 0, 0, fmt.Errorf("runtime/trace: %w", err)
	}
	cpu0 := spansCPU()
	d := loop(nil)
	trace.Stop()
	cpu := spansCPU() - cpu0
	if err := bw.Flush(); err != nil {
		return 0, 0, err
	}
	issued := float64((n / workers) * workers)
	return float64(d.Nanoseconds()) / issued, float64(cpu.Nanoseconds()) / issued, nil
}

func spansMedian(v []float64) float64 {
	s := append([]float64(nil), v...)
	sort.Float64s(s)
	if len(s) == 0 {
		return 0
	}
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func spansLoad() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil || len(b) < 14 {
		return "?"
	}
	var l1, l5, l15 float64
	if _, err := fmt.Sscanf(string(b), "%f %f %f", &l1, &l5, &l15); err != nil {
		return "?"
	}
	return fmt.Sprintf("%.2f %.2f %.2f", l1, l5, l15)
}
