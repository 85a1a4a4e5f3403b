package relay

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
)

func TestFanOutQueueAndSinkNames(t *testing.T) {
	t.Parallel()
	require.Equal(t, "public.orders__kafka", FanOutQueue("orders", "kafka"))
	require.Equal(t, "app.orders__web_hooks", FanOutQueue("App.Orders", "web_hooks"))
	require.Empty(t, CheckFanOutSink("public.orders", "web_hooks2"))
	for _, bad := range []string{"", "Kafka", "a__b", "_a", "a_", "2a", "a-b"} {
		require.Contains(t, CheckFanOutSink("public.orders", bad), "must be lower case letters and digits", bad)
	}
	require.Contains(t, CheckFanOutSink("public."+strings.Repeat("o", 55), "kafka12"), "longer than PostgreSQL's 63 bytes")
	require.Equal(t, "pg_catalog.hashtextextended('pgdrain fan-out public.orders', 0)", FanOutLockKey("orders"))
}

// New names every problem of a fan-out: its own fields, a queue fanned out twice, and a route on
// a queue that is fanned out (nothing else may drain it).
func TestNew_FanOutProblemsNameTheirFields(t *testing.T) {
	t.Parallel()
	pool, err := pgxpool.New(context.Background(), "postgres://nobody@127.0.0.1:1/none") // never connects
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	_, err = New(pool, []Route{{Queue: "public.orders", Sink: placeholderSink{}, SinkKind: "test"}},
		WithFanOut(FanOut{Queue: "orders", BatchSize: -1, Timeout: -time.Second}, FanOut{Queue: "public.orders"}, FanOut{}))
	require.Error(t, err)
	require.Equal(t, []string{
		"fan-out[0] (orders): BatchSize must be between 1 and 10000, got -1",
		"fan-out[0] (orders): Timeout must be positive (or 0 for the default), got -1s",
		"fan-out[1] (public.orders): Queue is already fanned out by fan-out[0]",
		"fan-out[2] (): Queue must be set to the queue table (\"schema.table\")",
		"routes[0] (public.orders): Queue is fanned out by fan-out[0]: nothing else may drain it; route its sinks' queues (FanOutQueue) instead",
	}, strings.Split(err.Error(), "\n"))

	r, err := New(pool, nil, WithFanOut(FanOut{Queue: "public.orders"}))
	require.NoError(t, err, "a relay may only fan out")
	require.Len(t, r.routes, 1)
	require.Equal(t, DefaultFanOutBatchSize, r.routes[0].Drainer.ApplyConcurrency, "the whole batch is applied at once")
}

type placeholderSink struct{}

func (placeholderSink) Deliver(_ context.Context, events []Event) []Result {
	return make([]Result, len(events))
}
func (placeholderSink) Close() error { return nil }
