package gocheck

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pgdrain/pgdrain/drainer"
	"github.com/pgdrain/pgdrain/relay"
)

// rlRoute is a fast route for checks on q's queue.
func rlRoute(q *drQueue, mode drainer.ClaimMode, sink relay.Sink, concurrency, batch int) relay.Route {
	cfg := q.config(mode)
	cfg.Table = ""
	cfg.ApplyConcurrency = concurrency
	return relay.Route{Queue: q.table, Sink: sink, SinkKind: "test", Drainer: cfg, BatchSize: batch}
}

// Two relay replicas, batches of up to 4 events out of 8 in flight: every event reaches the sink,
// each key's events in order, each with the identity EventIdentity gives its row, and no Deliver
// call is larger than BatchSize; also when each claim takes runs of up to 4 rows of a key
// (RunLength, issue 28: the relay inherits claim runs). As pgdrain_worker.
func TestRelay_DeliversEveryEventInKeyOrderAcrossReplicas(t *testing.T) {
	t.Parallel()
	drEachMode(t, func(t *testing.T, mode drainer.ClaimMode) {
		for _, run := range []int{1, 4} {
			t.Run(fmt.Sprintf("RunLength %d", run), func(t *testing.T) { relayInKeyOrder(t, mode, run) })
		}
	})
}

func relayInKeyOrder(t *testing.T, mode drainer.ClaimMode, run int) {
	{
		q := drNewQueue(t, drQueueOpts{partitionColumn: "partition_key"})
		want := map[string]int{}
		ids := map[int64]bool{}
		for seq := range 15 {
			for _, key := range []string{"a", "b", "c", "d", "e", "f"} {
				ids[q.enqueue(t, key, "op", seq)] = true
				want[key] = seq + 1
			}
		}
		pool := loginPool(t, q.db, "pgdrain_worker")
		sink := &rlSink{}
		route := rlRoute(q, mode, sink, 8, 4)
		route.Drainer.RunLength = run
		_, _, stop1 := rlStart(t, pool, []relay.Route{route})
		_, _, stop2 := rlStart(t, pool, []relay.Route{route})
		drWaitFor(t, 60*time.Second, "every event sent", func() bool { return q.sent(t) == int64(len(ids)) })
		require.NoError(t, stop1())
		require.NoError(t, stop2())

		eventIDs := rlEventIDs(t, q.pool, q.table)
		events, batches := sink.snapshot()
		rlRequireKeyOrder(t, events, func(e relay.Event) drEvent { return rlPayload(t, e) }, want)
		for _, e := range events {
			require.True(t, ids[e.ID], "event %d was never enqueued", e.ID)
			require.Equal(t, eventIDs[e.ID], e.Identity, "the identity is the row's event_id")
			require.Equal(t, "public.events", e.Queue)
			require.Equal(t, "op", e.Type)
		}
		for _, n := range batches {
			require.LessOrEqual(t, n, 4, "a Deliver call larger than BatchSize")
		}
		require.Equal(t, 2, sink.closed, "each relay closes its route's sink once at shutdown")
	}
}

// A permanent result poisons its row and lets its key go on; a transient one with a Retry-After
// is retried (once that time has come: TestRelay_RetryAfterIsTheRowsNextAttempt), its error text
// and the retry-after counter say what the peer asked for.
func TestRelay_RecordsEachOutcome(t *testing.T) {
	t.Parallel()
	drEachMode(t, func(t *testing.T, mode drainer.ClaimMode) {
		q := drNewQueue(t, drQueueOpts{partitionColumn: "partition_key"})
		bad := q.enqueue(t, "k", "bad", 0)
		q.enqueue(t, "k", "flaky", 1)
		q.enqueue(t, "k", "ok", 2)
		pool := loginPool(t, q.db, "pgdrain_worker")
		var failedOnce atomic.Bool
		sink := &rlSink{decide: func(e relay.Event) relay.Result {
			switch {
			case e.Type == "bad":
				return relay.PermanentResult(errors.New("peer said 422"))
			case e.Type == "flaky" && failedOnce.CompareAndSwap(false, true):
				return relay.Result{Outcome: relay.Transient, Err: errors.New("peer said 503"), RetryAfter: 300 * time.Millisecond}
			}
			return relay.SentResult()
		}}
		_, reg, stop := rlStart(t, pool, []relay.Route{rlRoute(q, mode, sink, 1, 1)})
		drWaitFor(t, 30*time.Second, "flaky and ok sent", func() bool { return q.sent(t) == 2 })
		require.NoError(t, stop())

		var attempts int
		var lastError string
		require.NoError(t, q.db.Pool.QueryRow(context.Background(),
			`SELECT attempt_count, last_error FROM public.events WHERE id = $1 AND sent_at IS NULL`, bad).Scan(&attempts, &lastError))
		require.Equal(t, 10, attempts, "a permanent result poisons the row")
		require.Equal(t, "peer said 422", lastError)
		events, _ := sink.snapshot()
		var order []string
		for _, e := range events {
			order = append(order, e.Type)
		}
		require.Equal(t, []string{"bad", "flaky", "flaky", "ok"}, order)
		require.Equal(t, 1.0, drMetric(t, reg, "pgdrain_relay_retry_after_total", map[string]string{"queue": q.table, "sink": "test"}))
		require.Equal(t, 1.0, drMetric(t, reg, "pgdrain_relay_deliveries_total",
			map[string]string{"queue": q.table, "sink": "test", "outcome": "permanent"}))
		require.Equal(t, 2.0, drMetric(t, reg, "pgdrain_relay_deliveries_total",
			map[string]string{"queue": q.table, "sink": "test", "outcome": "sent"}))
	})
}

// A sink that returns the wrong number of results, or panics, gets its batch retried rather
// than recorded on a guess.
func TestRelay_AMisbehavingSinkMakesItsBatchTransient(t *testing.T) {
	t.Parallel()
	q := drNewQueue(t, drQueueOpts{partitionColumn: "partition_key"})
	id := q.enqueue(t, "k", "op", 0)
	pool := loginPool(t, q.db, "pgdrain_worker")
	var calls atomic.Int32
	sink := &misbehavingSink{deliver: func(events []relay.Event) []relay.Result {
		switch calls.Add(1) {
		case 1:
			return nil
		case 2:
			panic("sink bug")
		}
		return []relay.Result{relay.SentResult()}
	}}
	_, _, stop := rlStart(t, pool, []relay.Route{{Queue: q.table, Sink: sink, SinkKind: "test",
		Drainer: drainer.Config{PollFallback: time.Minute, ApplyTimeout: 500 * time.Millisecond}}})
	drWaitFor(t, 30*time.Second, "the event sent", func() bool { return q.sent(t) == 1 })
	require.NoError(t, stop())
	require.EqualValues(t, 3, calls.Load())
	require.EqualValues(t, 2, q.count(t, `SELECT attempt_count FROM public.events WHERE id = $1`, id),
		"two transient attempts before the third sent")
}

type misbehavingSink struct {
	deliver func([]relay.Event) []relay.Result
}

func (s *misbehavingSink) Deliver(_ context.Context, events []relay.Event) []relay.Result {
	return s.deliver(events)
}

func (s *misbehavingSink) Close() error { return nil }

// New reports every problem of every route at once, each naming the route and the field.
func TestRelay_NewNamesEveryBadField(t *testing.T) {
	t.Parallel()
	q := drNewQueue(t, drQueueOpts{})
	_, err := relay.New(q.pool, []relay.Route{
		{Queue: q.table, Sink: &rlSink{}, SinkKind: "Test!", BatchSize: 4,
			Drainer: drainer.Config{ApplyConcurrency: 2, ApplyTimeout: 5 * time.Second, Lease: 5 * time.Second}},
		{Queue: "public.EVENTS", SinkKind: "test"},
	})
	require.Error(t, err)
	msg := err.Error()
	for _, want := range []string{
		"routes[0] (public.events): SinkKind must be a lower-case name",
		"routes[0] (public.events): BatchSize must be between 1 and Drainer.ApplyConcurrency (2)",
		"routes[0] (public.events): Drainer.Lease must be longer than ApplyTimeout",
		"routes[1] (public.EVENTS): Sink must be set",
		"routes[1] (public.EVENTS): Queue is already relayed by routes[0]",
	} {
		require.Contains(t, msg, want)
	}
	require.Len(t, strings.Split(msg, "\n"), 5, msg)
}

// The health endpoint says 200 while every queue runs and 503 once one failed (here: a queue that
// is not registered stops the whole relay, and Run names it); /metrics serves the relay's series.
func TestRelay_HealthAndMetricsEndpoints(t *testing.T) {
	t.Parallel()
	q := drNewQueue(t, drQueueOpts{partitionColumn: "partition_key"})
	q.enqueue(t, "k", "op", 0)
	pool := loginPool(t, q.db, "pgdrain_worker")
	r, reg, stop := rlStart(t, pool, []relay.Route{rlRoute(q, drainer.ClaimLease, &rlSink{}, 1, 1)})
	srv := httptest.NewServer(r.Handler(reg))
	defer srv.Close()
	drWaitFor(t, 30*time.Second, "the event sent", func() bool { return q.sent(t) == 1 })
	code, body := rlGet(t, srv.URL+"/healthz")
	require.Equal(t, http.StatusOK, code, body)
	var h relay.Health
	require.NoError(t, json.Unmarshal([]byte(body), &h))
	require.Len(t, h.Queues, 1)
	require.NotNil(t, h.Queues[0].LastClaim, "the claim that sent the event: %s", body)
	require.WithinDuration(t, time.Now(), *h.Queues[0].LastClaim, 30*time.Second)
	h.Queues[0].LastClaim = nil
	require.Equal(t, []relay.QueueHealth{{Queue: q.table, Sink: "test", State: "running"}}, h.Queues)
	code, body = rlGet(t, srv.URL+"/metrics")
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, body, `pgdrain_relay_deliveries_total{outcome="sent",queue="public.events",sink="test"} 1`)
	require.NoError(t, stop())
	code, _ = rlGet(t, srv.URL+"/healthz")
	require.Equal(t, http.StatusServiceUnavailable, code, "a stopped relay is not healthy")

	// A route whose queue is not registered: Run fails, naming it, and health says why.
	bad, _, stopBad := rlStart(t, pool, []relay.Route{{Queue: "public.nope", Sink: &rlSink{}, SinkKind: "test"}})
	err := stopBadAfterFailure(t, bad, stopBad)
	require.ErrorIs(t, err, drainer.ErrQueueNotRegistered)
	require.Contains(t, err.Error(), "queue public.nope")
	h = bad.Health(context.Background())
	require.False(t, h.OK)
	require.Equal(t, "failed", h.Queues[0].State)
}

// stopBadAfterFailure waits for a relay that is bound to fail to report it, then collects Run's
// error.
func stopBadAfterFailure(t *testing.T, r *relay.Relay, stop func() error) error {
	t.Helper()
	drWaitFor(t, 30*time.Second, "the relay to fail", func() bool {
		h := r.Health(context.Background())
		return len(h.Queues) == 1 && h.Queues[0].State == "failed"
	})
	return stop()
}

func rlGet(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, string(b)
}

// While claims rebuild a queue's partition heads after a crash, /healthz says so for the queue
// (heads_rebuild), without calling the relay unhealthy: its own claims rebuild them. As
// pgdrain_worker; a relay not yet running, whose claims would finish the rebuild at once.
func TestRelay_HealthSaysClaimsRebuildTheHeads(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	q := drNewQueue(t, drQueueOpts{partitionColumn: "partition_key"})
	q.enqueue(t, "k", "op", 0)
	forgetHeadsAsACrashDoes(t, q.pool)
	pool := loginPool(t, q.db, "pgdrain_worker")
	r, err := relay.New(pool, []relay.Route{rlRoute(q, drainer.ClaimLease, &rlSink{}, 1, 1)}, relay.WithLogger(drLogger(t)))
	require.NoError(t, err)
	h := r.Health(ctx)
	require.Equal(t, "ok", h.Database)
	require.Len(t, h.Queues, 1)
	require.Equal(t, "no part done yet", h.Queues[0].HeadsRebuild, "%+v", h)

	// Claims rebuild the heads in parts of at most 50 ms: one claim may not finish even one key's
	// on a loaded machine (it then says "done through key"), so claim until they are built.
	claimUntilHeadsBuilt(t, q.pool)
	h = r.Health(ctx)
	require.Empty(t, h.Queues[0].HeadsRebuild, "%+v", h)
}
