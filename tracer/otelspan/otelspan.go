// Package otelspan links rawstack's tracer spans to OpenTelemetry spans:
// [Start] opens a [tracer.Span] linked to the span context a
// context.Context carries (go.opentelemetry.io/otel/trace, the API only),
// so the samples taken in it name that trace and span — as the OTLP
// profiles data model's sample links, and as pprof's trace_id and span_id
// labels (Pyroscope's convention):
//
//	ctx, otelSpan := otel.Tracer("shop").Start(ctx, "checkout")
//	defer otelSpan.End()
//	sp := otelspan.Start(t, ctx, "checkout")
//	defer sp.End()
//
// It is a package of its own so that programs (and the rawstack command)
// that do not use OpenTelemetry do not link it.
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
