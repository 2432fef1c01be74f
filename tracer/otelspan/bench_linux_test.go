package otelspan_test

import (
	"context"
	"io"
	"slices"
	"syscall"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/rawstack/rawstack/tracer"
	"github.com/rawstack/rawstack/tracer/otelspan"
)

// discard is a span exporter that drops what it is given: the SDK's
// batch processor runs as in a service, without the network.
type discard struct{}

func (discard) ExportSpans(context.Context, []sdktrace.ReadOnlySpan) error { return nil }
func (discard) Shutdown(context.Context) error                             { return nil }

// sdkProvider is the OpenTelemetry SDK's provider as a service sets it
// up: every span sampled, a batch processor, an exporter.
func sdkProvider() *sdktrace.TracerProvider {
	return sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.AlwaysSample()),
		sdktrace.WithBatcher(discard{}, sdktrace.WithBatchTimeout(50*time.Millisecond)))
}

func startTracer(b *testing.B) *tracer.Tracer {
	tr, err := tracer.Start(context.Background(), tracer.Options{Frequency: 99, Streams: []io.Writer{io.Discard}})
	if err != nil {
		b.Skip(err)
	}
	return tr
}

// spans starts and ends n spans of tp's tracer, under a parent, and
// returns the ns each took, and the CPU time of the whole process per
// span (the tracer's and the SDK's goroutines included).
func spans(tp trace.TracerProvider, n int) (wall, cpu float64) {
	tr := tp.Tracer("bench")
	ctx, parent := tr.Start(context.Background(), "parent")
	c0 := processCPU()
	start := time.Now()
	for i := 0; i < n; i++ {
		_, s := tr.Start(ctx, "request")
		s.End()
	}
	d := time.Since(start)
	c1 := processCPU()
	parent.End()
	return float64(d.Nanoseconds()) / float64(n), float64(c1-c0) / float64(n)
}

func processCPU() int64 {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return ru.Utime.Nano() + ru.Stime.Nano()
}

// BenchmarkWrappedSDKSpan measures what NewTracerProvider adds to the
// start and end of an OpenTelemetry SDK span: rounds of 20000 spans,
// bare and wrapped in turn (A B A B), for b.N rounds of each (at least
// 11); it reports each one's median ns per span and the median of the
// rounds' wrapped/bare ratios, of the time the calling goroutine took
// and of the CPU time the process used.
func BenchmarkWrappedSDKSpan(b *testing.B) {
	tr := startTracer(b)
	defer tr.Stop()
	tp := sdkProvider()
	defer tp.Shutdown(context.Background())
	wrapped := otelspan.NewTracerProvider(tp, tr)
	const n = 20000
	spans(tp, n) // warm up
	spans(wrapped, n)
	rounds := max(b.N, 11)
	var bare, wrap, ratio, cpuRatio []float64
	b.ResetTimer()
	for i := 0; i < rounds; i++ {
		x, cx := spans(tp, n)
		y, cy := spans(wrapped, n)
		bare, wrap, ratio, cpuRatio = append(bare, x), append(wrap, y), append(ratio, y/x), append(cpuRatio, cy/cx)
	}
	b.StopTimer()
	b.ReportMetric(median(bare), "ns/bare-span")
	b.ReportMetric(median(wrap), "ns/wrapped-span")
	b.ReportMetric(median(ratio), "wrapped/bare")
	b.ReportMetric(median(cpuRatio), "wrapped/bare-cpu")
	b.ReportMetric(0, "ns/op")
}

func median(v []float64) float64 {
	v = slices.Clone(v)
	slices.Sort(v)
	return v[len(v)/2]
}

// BenchmarkSpanLink is a linked span's begin and end beside a plain
// span's (tracer.BenchmarkSpan measures the plain one alone).
func BenchmarkSpanLink(b *testing.B) {
	tr := startTracer(b)
	defer tr.Stop()
	ctx := context.Background()
	link := otelspan.Link(trace.NewSpanContext(trace.SpanContextConfig{TraceID: traceID, SpanID: spanID}))
	b.Run("plain", func(b *testing.B) {
		b.ReportAllocs()
		for i := 0; i < b.N; i++ {
			tr.Span(ctx, "request").End()
		}
	})
	b.Run("linked", func(b *testing.B) {
		b.ReportAllocs()
		for i := 0; i < b.N; i++ {
			tr.SpanLink(ctx, "request", link).End()
		}
	})
}
