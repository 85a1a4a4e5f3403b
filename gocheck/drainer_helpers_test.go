package gocheck

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/pgdrain/pgdrain/drainer"
	"github.com/pgdrain/pgdrain/internal/lastscrape"
	"github.com/pgdrain/pgdrain/internal/testdb"
)

// drEvent is the payload of the drainer checks' events.
type drEvent struct {
	Key string `json:"key"`
	Op  string `json:"op"`
	Seq int    `json:"seq"`
}

func drDecode(b []byte) (drEvent, error) {
	var e drEvent
	err := json.Unmarshal(b, &e)
	return e, err
}

// drModes are the two claim modes; every check that applies to both runs once per mode.
var drModes = []drainer.ClaimMode{drainer.ClaimLease, drainer.ClaimLock}

func drEachMode(t *testing.T, f func(t *testing.T, mode drainer.ClaimMode)) {
	t.Helper()
	for _, mode := range drModes {
		t.Run(mode.String(), func(t *testing.T) {
			t.Parallel()
			f(t, mode)
		})
	}
}

// drQueue is one check's database and queue.
type drQueue struct {
	db    *testdb.DB
	pool  *pgxpool.Pool
	table string
}

// drQueueOpts are the create_queue arguments a check changes; zero = create_queue's default
// except the backoff, which is short so retries happen within the check.
type drQueueOpts struct {
	partitionColumn string
	maxAttempts     int
	backoffMin      time.Duration
	backoffMax      time.Duration
	policy          string
}

func drNewQueue(t *testing.T, o drQueueOpts) *drQueue {
	t.Helper()
	return drQueueIn(t, testdb.New(t), o)
}

// drNewEncodedQueue is drNewQueue in a database of another server encoding (testdb.NewEncoded).
func drNewEncodedQueue(t *testing.T, encoding string, o drQueueOpts) *drQueue {
	t.Helper()
	return drQueueIn(t, testdb.NewEncoded(t, encoding), o)
}

// drQueueIn creates the check's queue, public.events, in db.
func drQueueIn(t *testing.T, db *testdb.DB, o drQueueOpts) *drQueue {
	t.Helper()
	q := &drQueue{db: db, pool: db.Pool, table: "public.events"}
	var partition *string
	if o.partitionColumn != "" {
		partition = &o.partitionColumn
	}
	if o.maxAttempts == 0 {
		o.maxAttempts = 10
	}
	if o.backoffMin == 0 {
		o.backoffMin = 50 * time.Millisecond
	}
	if o.backoffMax == 0 {
		o.backoffMax = 200 * time.Millisecond
	}
	if o.policy == "" {
		o.policy = "poison"
	}
	_, err := db.Pool.Exec(context.Background(),
		`SELECT outbox.create_queue($1, $2, $3, $4, $5, $6)`, q.table, partition, o.maxAttempts, o.backoffMin, o.backoffMax, o.policy)
	require.NoError(t, err)
	return q
}

// enqueue inserts one event and returns its id.
func (q *drQueue) enqueue(t *testing.T, key, op string, seq int) int64 {
	t.Helper()
	payload, err := json.Marshal(drEvent{Key: key, Op: op, Seq: seq})
	require.NoError(t, err)
	var partition *string
	var partitioned bool
	require.NoError(t, q.pool.QueryRow(context.Background(),
		`SELECT partition_column IS NOT NULL FROM outbox.queues WHERE queue = $1`, q.table).Scan(&partitioned))
	if partitioned {
		partition = &key
	}
	var id int64
	require.NoError(t, q.pool.QueryRow(context.Background(),
		`SELECT outbox.enqueue($1, $2, $3::jsonb, $4)`, q.table, op, string(payload), partition).Scan(&id))
	return id
}

// count runs a counting query.
func (q *drQueue) count(t *testing.T, sql string, args ...any) int64 {
	t.Helper()
	var n int64
	require.NoError(t, q.pool.QueryRow(context.Background(), sql, args...).Scan(&n))
	return n
}

func (q *drQueue) sent(t *testing.T) int64 {
	return q.count(t, `SELECT count(*) FROM public.events WHERE sent_at IS NOT NULL`)
}

// config returns a fast Config for checks: short timeouts, PollFallback long enough that a check
// passing proves the wake-up it is about (NOTIFY, backoff end, full batch), not the poll.
func (q *drQueue) config(mode drainer.ClaimMode) drainer.Config {
	return drainer.Config{
		Table:        q.table,
		ClaimMode:    mode,
		PollFallback: time.Minute,
		ApplyTimeout: 500 * time.Millisecond,
		Lease:        2 * time.Second,
	}
}

// drLogger logs to the test's output.
func drLogger(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelInfo}))
}

// drNew builds a drainer with a test logger and a fresh metrics registry, which keeps what the
// drainer exported when Run returned (and unregistered it) for the checks that count after stop.
func drNew(t *testing.T, pool *pgxpool.Pool, cfg drainer.Config, apply drainer.Applier[drEvent],
	opts ...drainer.Option[drEvent]) (*drainer.Drainer[drEvent], *lastscrape.Registry) {
	t.Helper()
	reg := lastscrape.New()
	opts = append([]drainer.Option[drEvent]{drainer.WithLogger[drEvent](drLogger(t)), drainer.WithMetrics[drEvent](reg)}, opts...)
	d, err := drainer.New(pool, cfg, drDecode, apply, opts...)
	require.NoError(t, err)
	return d, reg
}

// drStart runs d until the returned stop is called (or the test ends); stop returns Run's error.
func drStart[T any](t *testing.T, d *drainer.Drainer[T]) (stop func() error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	stop = sync.OnceValue(func() error {
		cancel()
		select {
		case err := <-done:
			return err
		case <-time.After(30 * time.Second):
			return errors.New("Run did not return within 30s of cancellation")
		}
	})
	t.Cleanup(func() { _ = stop() })
	return stop
}

// drTrickleIn runs the drainers ds while rows of new keys arrive, one every 5 ms, and returns once
// every row is delivered and they have stopped.
func drTrickleIn[T any](t *testing.T, q *drQueue, rows int, ds ...*drainer.Drainer[T]) {
	t.Helper()
	stops := make([]func() error, len(ds))
	for i, d := range ds {
		stops[i] = drStart(t, d)
	}
	for i := range rows {
		q.enqueue(t, fmt.Sprintf("k%d", i), "op", i)
		time.Sleep(5 * time.Millisecond)
	}
	drWaitFor(t, 10*time.Second, "every row is delivered", func() bool { return q.sent(t) == int64(rows) })
	for _, stop := range stops {
		require.NoError(t, stop())
	}
}

// drWaitFor polls cond until it holds, failing the test after timeout.
func drWaitFor(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// drMetric returns the value of the metric name with the given labels (counter, gauge, or a
// histogram's sample count), failing when it is not there.
func drMetric(t *testing.T, reg prometheus.Gatherer, name string, labels map[string]string) float64 {
	t.Helper()
	v, ok := drMetricIfAny(t, reg, name, labels)
	if !ok {
		t.Fatalf("metric %s%v not found", name, labels)
	}
	return v
}

// drMetricIfAny is drMetric for a metric that may not be there yet: ok is false then.
func drMetricIfAny(t *testing.T, reg prometheus.Gatherer, name string, labels map[string]string) (v float64, ok bool) {
	t.Helper()
	families, err := reg.Gather()
	require.NoError(t, err)
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
	next:
		for _, m := range f.GetMetric() {
			have := map[string]string{}
			for _, l := range m.GetLabel() {
				have[l.GetName()] = l.GetValue()
			}
			for k, v := range labels {
				if have[k] != v {
					continue next
				}
			}
			switch {
			case m.Counter != nil:
				return m.GetCounter().GetValue(), true
			case m.Gauge != nil:
				return m.GetGauge().GetValue(), true
			case m.Histogram != nil:
				return float64(m.GetHistogram().GetSampleCount()), true
			}
		}
	}
	return 0, false
}

func drResults(t *testing.T, reg prometheus.Gatherer, outcome string) float64 {
	t.Helper()
	return drMetric(t, reg, "pgdrain_outbox_results_total", map[string]string{"outcome": outcome})
}

// drLog records applies in order, safely across goroutines.
type drLog struct {
	mu      sync.Mutex
	entries []drEvent
	ids     []int64
}

func (l *drLog) add(ctx context.Context, e drEvent) {
	ev, _ := drainer.EventFrom(ctx)
	l.mu.Lock()
	defer l.mu.Unlock()
	l.entries = append(l.entries, e)
	l.ids = append(l.ids, ev.ID)
}

func (l *drLog) snapshot() ([]drEvent, []int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]drEvent(nil), l.entries...), append([]int64(nil), l.ids...)
}

func (l *drLog) len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.entries)
}

func drErr(format string, args ...any) error { return fmt.Errorf(format, args...) }
