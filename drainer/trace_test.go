package drainer_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/pgdrain/pgdrain/drainer"
)

// InjectTraceContext puts ctx's span in a copy of the headers, in place of the producer's trace
// context whatever the case of its names, and keeps every other header.
func TestInjectTraceContext_ReplacesTheProducersContextInACopy(t *testing.T) {
	t.Parallel()
	stored := map[string]string{"Traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
		"TraceState": "old=1", "x-tenant": "acme"}
	ctx, span := sdktrace.NewTracerProvider().Tracer("t").Start(context.Background(), "deliver")
	defer span.End()
	got := drainer.InjectTraceContext(ctx, stored)
	sc := span.SpanContext()
	require.Equal(t, map[string]string{"traceparent": "00-" + sc.TraceID().String() + "-" + sc.SpanID().String() + "-01",
		"x-tenant": "acme"}, got)
	require.Len(t, stored, 3, "the stored headers are not modified")
}

// Tracing off costs nothing: without a span the headers come back as they are, with no
// allocation.
func TestInjectTraceContext_WithoutASpanIsFree(t *testing.T) {
	stored := map[string]string{"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}
	ctx := context.Background()
	require.Zero(t, testing.AllocsPerRun(100, func() { _ = drainer.InjectTraceContext(ctx, stored) }))
	got := drainer.InjectTraceContext(ctx, stored)
	require.Equal(t, stored, got)
}
