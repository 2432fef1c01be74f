// Command requests serves requests as a Go service does, and profiles
// itself with the tracer into the file named by -o: four goroutines on
// two Ps (GOMAXPROCS 2, no runtime.LockOSThread), each in a function of
// its own (handlerA to handlerD), each serving requests one after the
// other, each request inside a span linked to an OpenTelemetry span and
// yielding (runtime.Gosched) every few microseconds of work, so the
// scheduler moves the goroutines between threads all the time.
//
// -mode start opens each request's rawstack span with otelspan.Start from
// a context carrying a fresh span context; -mode wrap starts each request
// as an OpenTelemetry SDK span through otelspan.NewTracerProvider. It
// prints one line per request, "span FUNCTION TRACEID SPANID", and exits
// 3 when the tracer does not start.
package main

import (
	"context"
	"crypto/rand"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime"
	"sync"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	_ "github.com/rawstack/rawstack/platform/linux/ebpf" // -backend ebpf
	"github.com/rawstack/rawstack/tracer"
	"github.com/rawstack/rawstack/tracer/otelspan"
)

var (
	out      = flag.String("o", "requests.rawstack", "trace file")
	backend  = flag.String("backend", "perf", "perf or ebpf")
	mode     = flag.String("mode", "start", "start: otelspan.Start; wrap: a wrapped SDK TracerProvider")
	requests = flag.Int("requests", 20, "requests per goroutine")
	work     = flag.Int("work", 2000, "yields per request (each after ~2 µs of work): CPU, not wall time, so that a loaded machine gives as many samples")
)

var (
	mu    sync.Mutex
	lines []string
	sink  uint64
	h     *handler
	wg    sync.WaitGroup
)

type handler struct {
	t     *tracer.Tracer
	otelT trace.Tracer
}

// begin opens the request's spans and returns the function that ends
// them, and the span's ids.
func (h *handler) begin(fn string) (end func(), sc trace.SpanContext) {
	if h.otelT != nil {
		_, s := h.otelT.Start(context.Background(), fn)
		return func() { s.End() }, s.SpanContext()
	}
	var tid trace.TraceID
	var sid trace.SpanID
	rand.Read(tid[:])
	rand.Read(sid[:])
	sc = trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid, TraceFlags: trace.FlagsSampled})
	sp := otelspan.Start(h.t, trace.ContextWithSpanContext(context.Background(), sc), fn)
	return sp.End, sc
}

func note(fn string, sc trace.SpanContext) {
	mu.Lock()
	lines = append(lines, fmt.Sprintf("span %s %s %s", fn, sc.TraceID(), sc.SpanID()))
	mu.Unlock()
}

// serve serves requests one after the other for the handler that
// calls it, each in its span, spinning -work times for a couple of µs
// and yielding.
//
//go:noinline
func serve(fn string) {
	for r := 0; r < *requests; r++ {
		end, sc := h.begin(fn)
		var x uint64
		for n := 0; n < *work; n++ {
			for i := 0; i < 2000; i++ {
				x = x*6364136223846793005 + 1442695040888963407
			}
			runtime.Gosched()
		}
		sink += x
		end()
		note("main."+fn, sc)
	}
}

// The handlers, each a function of its own, so that a sample's stack
// says which one it is in, and each goroutine's first function.

//go:noinline
func handlerA() { defer wg.Done(); serve("handlerA") }

//go:noinline
func handlerB() { defer wg.Done(); serve("handlerB") }

//go:noinline
func handlerC() { defer wg.Done(); serve("handlerC") }

//go:noinline
func handlerD() { defer wg.Done(); serve("handlerD") }

func main() {
	flag.Parse()
	runtime.GOMAXPROCS(2)
	f, err := os.Create(*out)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	opts := tracer.Options{Frequency: 999, Streams: []io.Writer{f}}
	if *backend == "ebpf" {
		opts.Backend = tracer.BackendEBPF
	}
	t, err := tracer.Start(context.Background(), opts)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(3)
	}
	h = &handler{t: t}
	var tp *sdktrace.TracerProvider
	if *mode == "wrap" {
		tp = sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.AlwaysSample()))
		h.otelT = otelspan.NewTracerProvider(tp, t).Tracer("requests")
	}
	// Each goroutine starts with its handler (no arguments, so no
	// wrapper): its timeline track is named after it.
	wg.Add(4)
	go handlerA()
	go handlerB()
	go handlerC()
	go handlerD()
	wg.Wait()
	if err := t.Stop(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	if tp != nil {
		tp.Shutdown(context.Background())
	}
	if err := f.Close(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	for _, l := range lines {
		fmt.Println(l)
	}
}
