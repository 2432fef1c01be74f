// Command cgospan profiles itself into the file named by its first
// argument while two goroutines, on two Ps and not locked to threads,
// each open a span linked to an OpenTelemetry span and spend it in C
// (cgo): a loop in spin_c, called in slices with a Go yield between. It
// prints "span FUNCTION SPANID" for each, and exits 3 when the tracer does
// not start.
package main

/*
#include <stdint.h>

// spin_c burns n iterations of a multiply-add, in C.
__attribute__((noinline)) static uint64_t spin_c(uint64_t n) {
	uint64_t x = 1;
	for (uint64_t i = 0; i < n; i++)
		x = x * 6364136223846793005ULL + 1442695040888963407ULL;
	return x;
}
*/
import "C"

import (
	"context"
	"crypto/rand"
	"fmt"
	"io"
	"os"
	"runtime"
	"sync"

	"go.opentelemetry.io/otel/trace"

	"github.com/rawstack/rawstack/tracer"
	"github.com/rawstack/rawstack/tracer/otelspan"
)

var (
	t    *tracer.Tracer
	wg   sync.WaitGroup
	sink uint64
	mu   sync.Mutex
	out  []string
)

func work(fn string) {
	defer wg.Done()
	var sid trace.SpanID
	var tid trace.TraceID
	rand.Read(tid[:])
	rand.Read(sid[:])
	sc := trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid, TraceFlags: trace.FlagsSampled})
	sp := otelspan.Start(t, trace.ContextWithSpanContext(context.Background(), sc), fn)
	for i := 0; i < 400; i++ {
		sink += uint64(C.spin_c(500000))
		runtime.Gosched()
	}
	sp.End()
	mu.Lock()
	out = append(out, fmt.Sprintf("span main.%s %s", fn, sid))
	mu.Unlock()
}

//go:noinline
func cgoA() { work("cgoA") }

//go:noinline
func cgoB() { work("cgoB") }

func main() {
	runtime.GOMAXPROCS(2)
	f, err := os.Create(os.Args[1])
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	t, err = tracer.Start(context.Background(), tracer.Options{Frequency: 999, Streams: []io.Writer{f}})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(3)
	}
	wg.Add(2)
	go cgoA()
	go cgoB()
	wg.Wait()
	if err := t.Stop(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	f.Close()
	for _, l := range out {
		fmt.Println(l)
	}
}
