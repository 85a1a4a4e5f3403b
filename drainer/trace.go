package drainer

import (
	"context"
	"maps"
	"slices"
	"strings"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	semconv "go.opentelemetry.io/otel/semconv/v1.39.0"
	"go.opentelemetry.io/otel/trace"
)

// tracerName names the drainer's tracer (the instrumentation scope of its spans).
const tracerName = "github.com/pgdrain/pgdrain/drainer"

// traceContext reads and writes W3C traceparent and tracestate. It is fixed rather than the
// global propagator: what a producer stores in the row's headers is the W3C format, whatever the
// process has installed for its own RPCs.
var traceContext propagation.TraceContext

// WithTracerProvider makes the drainer start one span per delivery attempt with tp's tracer: a
// consumer span named "process <queue>", a child of the trace context the producer stored in the
// event's headers (traceparent and tracestate, W3C Trace Context; a new trace when there is none
// or it does not parse), ended when the Applier returns, with the outcome and the error. The
// Applier's ctx carries the span, so what the Applier calls joins the trace; to hand the trace to
// a peer, inject ctx's span (InjectTraceContext). Without it (the default) no span is made and
// nothing is read from the headers. A nil tp keeps tracing off.
func WithTracerProvider[T any](tp trace.TracerProvider) Option[T] {
	return func(d *Drainer[T]) {
		if tp != nil {
			d.tracer = tp.Tracer(tracerName)
		}
	}
}

// InjectTraceContext returns headers with the trace context of ctx's span (traceparent and, when
// there is one, tracestate) in place of the ones given, for a peer to continue the trace (the
// relay does this for every sink).
// headers is not modified: the result is a copy. Without a span in ctx (tracing off) it returns
// headers as they are.
func InjectTraceContext(ctx context.Context, headers map[string]string) map[string]string {
	if !trace.SpanContextFromContext(ctx).IsValid() {
		return headers
	}
	out := make(map[string]string, len(headers)+2)
	for k, v := range headers {
		// The producer's trace context is replaced, not kept beside (in any case of the name):
		// the peer's parent is the span.
		if !isTraceHeader(k) {
			out[k] = v
		}
	}
	traceContext.Inject(ctx, propagation.MapCarrier(out))
	return out
}

func isTraceHeader(name string) bool {
	return strings.EqualFold(name, "traceparent") || strings.EqualFold(name, "tracestate")
}

// headerCarrier reads the event's headers for Extract. Header names are case-insensitive in HTTP,
// where a producer's traceparent usually comes from, so "Traceparent" is found too.
type headerCarrier map[string]string

func (c headerCarrier) Get(key string) string {
	if v, ok := c[key]; ok {
		return v
	}
	for k, v := range c {
		if strings.EqualFold(k, key) {
			return v
		}
	}
	return ""
}

func (c headerCarrier) Set(key, value string) { c[key] = value }

func (c headerCarrier) Keys() []string { return slices.Collect(maps.Keys(c)) }

// startSpan starts the delivery span of j, a child of the producer's trace context.
func (d *Drainer[T]) startSpan(ctx context.Context, j *job) (context.Context, trace.Span) {
	if len(j.event.Headers) > 0 {
		ctx = traceContext.Extract(ctx, headerCarrier(j.event.Headers))
	}
	return d.tracer.Start(ctx, "process "+j.event.Table,
		trace.WithSpanKind(trace.SpanKindConsumer),
		trace.WithAttributes(
			semconv.MessagingSystemKey.String("pgdrain"),
			semconv.MessagingOperationTypeProcess,
			semconv.MessagingDestinationName(j.event.Table),
			semconv.MessagingMessageID(j.event.EventID),
			attribute.String("pgdrain.event_type", j.event.Type),
			attribute.Int64("pgdrain.id", j.event.ID),
			attribute.Int("pgdrain.attempts", j.event.Attempts),
		))
}

// endSpan records the attempt's outcome on span and ends it.
func endSpan(span trace.Span, j *job, err error) {
	span.SetAttributes(attribute.String("pgdrain.outcome", j.disposition.String()))
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, j.disposition.String())
	}
	span.End()
}
