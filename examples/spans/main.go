// Command spans instruments itself with spans, markers and a counter while
// the tracer samples it, then symbolizes its own trace and writes it as a
// Perfetto trace to open in https://ui.perfetto.dev (or convert the raw
// trace to other formats with `rawstack convert`).
//
//	go run ./examples/spans -o spans.rawstack -perfetto spans.pftrace
//
// Each "request" span holds a "parse" span and a "compute" span, run by
// two worker goroutines; a marker notes each finished request and a
// counter the requests left. Sampling one's own process needs no
// privileges where kernel.perf_event_paranoid ≤ 2.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rawstack/rawstack/format"
	"github.com/rawstack/rawstack/symbolizer"
	"github.com/rawstack/rawstack/symbolizer/export/perfetto"
	_ "github.com/rawstack/rawstack/symbolizer/sources" // every symbol source
	"github.com/rawstack/rawstack/tracer"
)

func main() {
	out := flag.String("o", "spans.rawstack", "raw trace file to write")
	pf := flag.String("perfetto", "spans.pftrace", "Perfetto trace to write (\"\": none)")
	d := flag.Duration("d", time.Second, "how long to work")
	flag.Parse()

	f, err := os.Create(*out)
	if err != nil {
		log.Fatal(err)
	}
	t, err := tracer.Start(context.Background(), tracer.Options{Frequency: 999, Streams: []io.Writer{f}})
	if err != nil {
		log.Fatal(err)
	}
	work(t, *d)
	t.Capture("done") // a marker with this goroutine's stack
	if err := t.Stop(); err != nil {
		log.Fatal(err)
	}
	if err := f.Close(); err != nil {
		log.Fatal(err)
	}
	st := t.Stats()
	fmt.Fprintf(os.Stderr, "spans: wrote %s: %d samples, %d threads\n", *out, st.Samples, st.Threads)
	if *pf != "" {
		if err := toPerfetto(*out, *pf); err != nil {
			log.Fatal(err)
		}
		fmt.Fprintf(os.Stderr, "spans: wrote %s (open it in https://ui.perfetto.dev)\n", *pf)
	}
}

// The main goroutine stays on the main thread (see work).
func init() { runtime.LockOSThread() }

// work runs requests on two workers until d has passed. Each worker keeps
// its OS thread, so a timeline shows one thread track per worker with its
// spans and samples together (spans belong to the thread they begin on),
// and worker 0 is the main thread: viewers that open the first thread,
// as speedscope does, open a busy one.
func work(t *tracer.Tracer, d time.Duration) {
	end := time.Now().Add(d)
	var left atomic.Int64
	left.Store(1 << 20)
	worker := func() {
		for time.Now().Before(end) {
			request(t, context.Background())
			t.Counter("requests left", float64(left.Add(-1)))
		}
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		runtime.LockOSThread()
		worker()
	}()
	worker()
	wg.Wait()
}

func request(t *tracer.Tracer, ctx context.Context) {
	sp := t.Span(ctx, "request")
	defer sp.End()
	ctx = sp.Context(ctx) // spans opened with ctx are its children
	n := parse(t, ctx)
	compute(t, ctx, n)
	t.Marker("request done")
}

//go:noinline
func parse(t *tracer.Tracer, ctx context.Context) int {
	sp := t.Span(ctx, "parse")
	defer sp.End()
	h := uint64(14695981039346656037)
	for i := 0; i < 300000; i++ {
		h ^= uint64(i)
		h *= 1099511628211
	}
	return int(h%1000) + 1000
}

//go:noinline
func compute(t *tracer.Tracer, ctx context.Context, n int) int {
	sp := t.Span(ctx, "compute")
	defer sp.End()
	s := make([]int, n)
	for i := range s {
		s[i] = (i * 7919) % n
	}
	for i := 1; i < len(s); i++ { // insertion sort: slow on purpose
		for j := i; j > 0 && s[j-1] > s[j]; j-- {
			s[j-1], s[j] = s[j], s[j-1]
		}
	}
	return s[n/2]
}

// toPerfetto symbolizes the raw trace and writes it as a Perfetto trace.
func toPerfetto(in, out string) error {
	r, err := format.Open(in)
	if err != nil {
		return err
	}
	defer r.Close()
	p, err := symbolizer.Build(r, &symbolizer.Options{Timeline: true})
	if err != nil {
		return err
	}
	f, err := os.Create(out)
	if err != nil {
		return err
	}
	if err := perfetto.Write(f, p); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
