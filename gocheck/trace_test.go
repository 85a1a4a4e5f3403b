package gocheck

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/pgdrain/pgdrain/drainer"
	"github.com/pgdrain/pgdrain/relay"
)

// The producer's transaction: trace 4bf92f35..., span 00f067aa..., sampled, with vendor state.
const (
	trProducerTrace  = "4bf92f3577b34da6a3ce929d0e0e4736"
	trProducerSpan   = "00f067aa0ba902b7"
	trTraceparent    = "00-" + trProducerTrace + "-" + trProducerSpan + "-01"
	trTracestate     = "vendor=opaque"
	trEnqueueWithCtx = `SELECT event_id::text FROM outbox.enqueue_event($1, $2, '{"key": "a"}', 'a',
		headers => jsonb_build_object('traceparent', $3::text, 'tracestate', $4::text))`
)

// trRecorder is a TracerProvider that keeps every ended span in memory (the SDK's tracetest).
func trRecorder() (*sdktrace.TracerProvider, *tracetest.SpanRecorder) {
	rec := tracetest.NewSpanRecorder()
	return sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec)), rec
}

func trAttr(s sdktrace.ReadOnlySpan, key string) attribute.Value {
	for _, kv := range s.Attributes() {
		if string(kv.Key) == key {
			return kv.Value
		}
	}
	return attribute.Value{}
}

// With a TracerProvider, the drainer starts one consumer span per delivery attempt, a child of
// the traceparent the producer stored in the event's headers (Trace Context, tracestate kept),
// and hands it to the Applier in ctx; a failed attempt's span says so. An event without a trace
// context starts a trace of its own. Without a TracerProvider the Applier's ctx has no span. As
// pgdrain_producer and pgdrain_worker.
func TestDrainer_TracesEachDeliveryAttemptUnderTheProducersTrace(t *testing.T) {
	t.Parallel()
	drEachMode(t, func(t *testing.T, mode drainer.ClaimMode) {
		ctx := context.Background()
		q := drNewQueue(t, drQueueOpts{partitionColumn: "resource_id"})
		producer := loginPool(t, q.db, "pgdrain_producer")
		var tracedID string
		require.NoError(t, producer.QueryRow(ctx, trEnqueueWithCtx, q.table, "traced", trTraceparent, trTracestate).Scan(&tracedID))
		_, err := producer.Exec(ctx, `SELECT outbox.enqueue($1, 'untraced', '{"key": "b"}', 'b')`, q.table)
		require.NoError(t, err)

		tp, rec := trRecorder()
		var failedOnce atomic.Bool
		var mu sync.Mutex
		inApply := map[string][]trace.SpanContext{}
		d, _ := drNew(t, loginPool(t, q.db, "pgdrain_worker"), q.config(mode), func(ctx context.Context, typ string, _ drEvent) error {
			mu.Lock()
			inApply[typ] = append(inApply[typ], trace.SpanContextFromContext(ctx))
			mu.Unlock()
			if typ == "traced" && failedOnce.CompareAndSwap(false, true) {
				return errors.New("peer said 503")
			}
			return nil
		}, drainer.WithTracerProvider[drEvent](tp))
		stop := drStart(t, d)
		drWaitFor(t, 30*time.Second, "both sent", func() bool { return q.sent(t) == 2 })
		require.NoError(t, stop())

		spans := rec.Ended()
		require.Len(t, spans, 3, "one span per attempt: traced twice, untraced once")
		var traced []sdktrace.ReadOnlySpan
		for _, s := range spans {
			require.Equal(t, "process public.events", s.Name())
			require.Equal(t, trace.SpanKindConsumer, s.SpanKind())
			require.Equal(t, "pgdrain", trAttr(s, "messaging.system").AsString())
			if trAttr(s, "pgdrain.event_type").AsString() == "traced" {
				traced = append(traced, s)
				continue
			}
			require.False(t, s.Parent().IsValid(), "an event without a trace context starts its own trace")
			require.NotEqual(t, trProducerTrace, s.SpanContext().TraceID().String())
		}
		require.Len(t, traced, 2)
		mu.Lock()
		defer mu.Unlock()
		for i, s := range traced {
			require.Equal(t, trProducerTrace, s.SpanContext().TraceID().String(), "the attempt is in the producer's trace")
			require.Equal(t, trProducerSpan, s.Parent().SpanID().String(), "a child of the producer's span")
			require.True(t, s.Parent().IsRemote())
			require.Equal(t, trTracestate, s.SpanContext().TraceState().String())
			require.Equal(t, tracedID, trAttr(s, "messaging.message.id").AsString())
			require.Equal(t, int64(i), trAttr(s, "pgdrain.attempts").AsInt64())
			require.Equal(t, s.SpanContext(), inApply["traced"][i], "the Applier's ctx carries the attempt's span")
		}
		require.Equal(t, codes.Error, traced[0].Status().Code)
		require.Equal(t, "transient", trAttr(traced[0], "pgdrain.outcome").AsString())
		require.Len(t, traced[0].Events(), 1, "the error is recorded on the span")
		require.Equal(t, codes.Unset, traced[1].Status().Code)
		require.Equal(t, "sent", trAttr(traced[1], "pgdrain.outcome").AsString())
	})

	// Off by default: no span in the Applier's ctx.
	q := drNewQueue(t, drQueueOpts{partitionColumn: "resource_id"})
	var tracedID string
	require.NoError(t, loginPool(t, q.db, "pgdrain_producer").QueryRow(context.Background(), trEnqueueWithCtx,
		q.table, "traced", trTraceparent, trTracestate).Scan(&tracedID))
	var sawSpan atomic.Bool
	d, _ := drNew(t, loginPool(t, q.db, "pgdrain_worker"), q.config(drainer.ClaimLease), func(ctx context.Context, _ string, _ drEvent) error {
		sawSpan.Store(trace.SpanContextFromContext(ctx).IsValid())
		return nil
	})
	stop := drStart(t, d)
	drWaitFor(t, 30*time.Second, "sent", func() bool { return q.sent(t) == 1 })
	require.NoError(t, stop())
	require.False(t, sawSpan.Load(), "without a TracerProvider the drainer makes no span")
}

// With a TracerProvider the relay sends the delivery span's trace context, not the producer's:
// the webhook peer receives a traceparent in the producer's trace whose parent is the relay's
// span (tracestate kept), so the peer's work hangs under the delivery. Without one, the stored
// headers go as they are. As pgdrain_producer and pgdrain_worker.
func TestRelay_PropagatesTheDeliverySpanToTheSink(t *testing.T) {
	t.Parallel()
	for _, traced := range []bool{true, false} {
		t.Run(fmt.Sprintf("traced=%v", traced), func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			q := drNewQueue(t, drQueueOpts{partitionColumn: "partition_key"})
			var eventID string
			require.NoError(t, loginPool(t, q.db, "pgdrain_producer").QueryRow(ctx, trEnqueueWithCtx,
				q.table, "order.created", trTraceparent, trTracestate).Scan(&eventID))
			var mu sync.Mutex
			var got http.Header
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				_, _ = io.Copy(io.Discard, r.Body)
				mu.Lock()
				got = r.Header.Clone()
				mu.Unlock()
				w.WriteHeader(http.StatusNoContent)
			}))
			defer srv.Close()
			route := rlWebhookRoute(t, q, drainer.ClaimLease, srv.URL)
			tp, rec := trRecorder()
			var opts []relay.Option
			if traced {
				opts = append(opts, relay.WithTracerProvider(tp))
			}
			r, err := relay.New(loginPool(t, q.db, "pgdrain_worker"), []relay.Route{route}, append(opts, relay.WithLogger(drLogger(t)))...)
			require.NoError(t, err)
			rctx, cancel := context.WithCancel(ctx)
			done := make(chan error, 1)
			go func() { done <- r.Run(rctx) }()
			drWaitFor(t, 30*time.Second, "sent", func() bool { return q.sent(t) == 1 })
			cancel()
			require.NoError(t, <-done)

			mu.Lock()
			defer mu.Unlock()
			require.Equal(t, trTracestate, got.Get("tracestate"))
			if !traced {
				require.Empty(t, rec.Ended())
				require.Equal(t, trTraceparent, got.Get("traceparent"), "tracing off: the producer's header as stored")
				return
			}
			spans := rec.Ended()
			require.Len(t, spans, 1)
			span := spans[0].SpanContext()
			require.Equal(t, trProducerSpan, spans[0].Parent().SpanID().String())
			require.Equal(t, "00-"+trProducerTrace+"-"+span.SpanID().String()+"-01", got.Get("traceparent"),
				"the peer's parent is the relay's delivery span")
			require.Equal(t, eventID, got.Get("webhook-id"))
		})
	}
}
