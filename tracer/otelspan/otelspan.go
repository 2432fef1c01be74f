// Package otelspan links rawstack's tracer spans to OpenTelemetry spans,
// so the samples taken in a span name its trace and span — as the OTLP
// profiles data model's sample links, and as pprof's trace_id and span_id
// labels (Pyroscope's convention). Wrap the application's
// TracerProvider once, and every span started through it is also a
// rawstack span:
//
//	tp := sdktrace.NewTracerProvider(...) // or any trace.TracerProvider
//	otel.SetTracerProvider(otelspan.NewTracerProvider(tp, t))
//
// Or open one rawstack span for the span a context carries with [Start]:
//
//	ctx, otelSpan := otel.Tracer("shop").Start(ctx, "checkout")
//	defer otelSpan.End()
//	sp := otelspan.Start(t, ctx, "checkout")
//	defer sp.End()
//
// A linked span covers the samples of the goroutine that opened it, on
// whatever thread it runs, and of the goroutines it starts while it is
// open ([tracer.Tracer.SpanLink]).
//
// It imports only the OpenTelemetry API (go.opentelemetry.io/otel/trace),
// and is a package of its own so that programs (and the rawstack
// command) that do not use OpenTelemetry do not link it.
package otelspan

import (
	"context"

	"go.opentelemetry.io/otel/trace"

	"github.com/rawstack/rawstack/tracer"
)

// Start opens a span named name on t ([tracer.Tracer.SpanLink]), linked
// to the OpenTelemetry span ctx carries; without a valid one it is a
// plain [tracer.Tracer.Span]. The rawstack span's parent is the rawstack
// span ctx carries, if any.
func Start(t *tracer.Tracer, ctx context.Context, name string) tracer.Span {
	sc := trace.SpanContextFromContext(ctx)
	if !sc.IsValid() {
		return t.Span(ctx, name)
	}
	return t.SpanLink(ctx, name, Link(sc))
}

// Link returns the link of an OpenTelemetry span context.
func Link(sc trace.SpanContext) tracer.Link {
	return tracer.Link{TraceID: sc.TraceID(), SpanID: sc.SpanID()}
}

// NewTracerProvider wraps tp (the OpenTelemetry SDK's, or any other):
// every span started through a Tracer it returns is also a rawstack span
// of t with the same name, opened after it started and linked to it
// ([tracer.Tracer.SpanLink]), and ended with it, just before it ends. The
// span returned, the one in the context returned, and the Tracers its
// TracerProvider method gives are the wrapper's, so spans started from
// them are wrapped too; everything else passes through to tp's span.
// With a nil t, NewTracerProvider returns tp; while t is stopped, and for
// spans whose context is not valid (a no-op provider's), spans pass
// through untouched. The wrapper adds to an SDK span's start and end
// about 40% of what they cost (BenchmarkWrappedSDKSpan: a linked span
// and the wrapper, which is its own context, on the calling goroutine,
// the linked span's filing in the tracer's).
func NewTracerProvider(tp trace.TracerProvider, t *tracer.Tracer) trace.TracerProvider {
	if t == nil {
		return tp
	}
	return &provider{TracerProvider: tp, t: t}
}

// provider embeds the wrapped provider: methods the API adds later pass
// through.
type provider struct {
	trace.TracerProvider
	t *tracer.Tracer
}

func (p *provider) Tracer(name string, opts ...trace.TracerOption) trace.Tracer {
	return &otelTracer{Tracer: p.TracerProvider.Tracer(name, opts...), p: p}
}

type otelTracer struct {
	trace.Tracer
	p *provider
}

func (tr *otelTracer) Start(ctx context.Context, name string, opts ...trace.SpanStartOption) (context.Context, trace.Span) {
	ctx, s := tr.Tracer.Start(ctx, name, opts...)
	sc := s.SpanContext()
	if !sc.IsValid() {
		return ctx, s
	}
	rs := tr.p.t.SpanLink(ctx, name, Link(sc))
	if rs.ID() == 0 { // the tracer is stopped
		return ctx, s
	}
	w := &span{Span: s, rs: rs, p: tr.p}
	if spanKey == nil {
		return trace.ContextWithSpan(ctx, w), w
	}
	w.ctx = spanCtx{Context: ctx, s: w}
	return &w.ctx, w
}

// span is a wrapped span, its rawstack span, and the context that
// carries it.
type span struct {
	trace.Span
	rs  tracer.Span
	p   *provider
	ctx spanCtx
}

func (s *span) End(opts ...trace.SpanEndOption) {
	s.rs.End()
	s.Span.End(opts...)
}

func (s *span) TracerProvider() trace.TracerProvider { return s.p }

// spanCtx is what trace.ContextWithSpan(ctx, s) returns, without an
// allocation of its own: ctx, where s is the current span.
type spanCtx struct {
	context.Context
	s *span
}

func (c *spanCtx) Value(key any) any {
	if key == spanKey {
		return c.s
	}
	return c.Context.Value(key)
}

// spanKey is the key under which a context holds its current span, as
// trace.SpanFromContext asks for it; nil if that could not be learnt, or
// if a context answering it is not what SpanFromContext reads (Start
// then calls trace.ContextWithSpan).
var spanKey any

func init() {
	var p keyProbe
	trace.SpanFromContext(&p)
	if len(p.keys) != 1 {
		return
	}
	spanKey = p.keys[0]
	w := &span{}
	w.ctx = spanCtx{Context: context.Background(), s: w}
	if trace.SpanFromContext(&w.ctx) != trace.Span(w) {
		spanKey = nil
	}
}

// keyProbe is a context that records the keys it is asked for.
type keyProbe struct {
	context.Context
	keys []any
}

func (p *keyProbe) Value(key any) any {
	p.keys = append(p.keys, key)
	return nil
}
