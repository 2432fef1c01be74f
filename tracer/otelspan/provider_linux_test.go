package otelspan_test

import (
	"context"
	"errors"
	"io"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/rawstack/rawstack/tracer"
	"github.com/rawstack/rawstack/tracer/otelspan"
)

// TestProviderContext holds what the wrapper's spans and contexts must do
// as the SDK's do: the context carries the wrapped span, spans started
// from it are the SDK's children of it, and the context passes values,
// cancellation and deadlines through from the context it came from.
func TestProviderContext(t *testing.T) {
	tr, err := tracer.Start(context.Background(), tracer.Options{Frequency: 99, Streams: []io.Writer{io.Discard}})
	if err != nil {
		t.Skip(err)
	}
	defer tr.Stop()
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	wrapped := otelspan.NewTracerProvider(tp, tr)

	type key struct{}
	base, cancel := context.WithCancel(context.WithValue(context.Background(), key{}, "v"))
	ctx, parent := wrapped.Tracer("t").Start(base, "parent")
	if got := trace.SpanFromContext(ctx); got != parent {
		t.Fatalf("SpanFromContext = %T %v, want the span Start returned", got, got)
	}
	if parent.TracerProvider() != wrapped {
		t.Error("the span's TracerProvider is not the wrapper")
	}
	if ctx.Value(key{}) != "v" {
		t.Error("a value of the context Start was given is lost")
	}
	_, child := parent.TracerProvider().Tracer("t").Start(ctx, "child")
	child.End()
	inner, innerCancel := context.WithCancel(ctx)
	defer innerCancel()
	cancel()
	<-inner.Done()
	if !errors.Is(ctx.Err(), context.Canceled) || !errors.Is(inner.Err(), context.Canceled) {
		t.Errorf("after cancel: Err = %v, child context's %v", ctx.Err(), inner.Err())
	}
	parent.End()

	ended := rec.Ended()
	if len(ended) != 2 || ended[0].Name() != "child" || ended[1].Name() != "parent" {
		t.Fatalf("the SDK ended %d spans, want child then parent", len(ended))
	}
	if ended[0].Parent().SpanID() != parent.SpanContext().SpanID() {
		t.Errorf("child's parent is %v, want %v", ended[0].Parent().SpanID(), parent.SpanContext().SpanID())
	}

	// Two allocations: the wrapper with its context, and the linked
	// span's record (apart, so that goroutines that inherit the link
	// keep only that alive, not the span and its context).
	allocs := func(tp trace.TracerProvider) float64 {
		tr := tp.Tracer("t")
		return testing.AllocsPerRun(1000, func() {
			_, s := tr.Start(ctx, "request")
			s.End()
		})
	}
	if bare, wrap := allocs(tp), allocs(wrapped); wrap > bare+2 {
		t.Errorf("a wrapped span allocates %v times, a bare one %v: the wrapper more than twice", wrap, bare)
	}
}
