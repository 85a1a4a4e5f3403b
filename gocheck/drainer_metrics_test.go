package gocheck

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/require"

	"github.com/pgdrain/pgdrain/drainer"
)

// drMetricNames is every metric WithMetrics exports: the names dashboards are built against.
var drMetricNames = []string{
	"pgdrain_outbox_results_total",
	"pgdrain_outbox_lease_lost_total",
	"pgdrain_outbox_claim_duration_seconds",
	"pgdrain_repairs_total",
	"pgdrain_outbox_backlog_depth",
	"pgdrain_outbox_oldest_pending_age_seconds",
	"pgdrain_outbox_poisoned",
	"pgdrain_outbox_heads_rebuilding",
}

var drGauges = []string{"pgdrain_outbox_backlog_depth", "pgdrain_outbox_oldest_pending_age_seconds", "pgdrain_outbox_poisoned",
	"pgdrain_outbox_heads_rebuilding"}

// statsCounter counts the outbox.stats calls a pool sends.
type statsCounter struct{ calls atomic.Int64 }

func (s *statsCounter) TraceQueryStart(ctx context.Context, _ *pgx.Conn, data pgx.TraceQueryStartData) context.Context {
	if strings.Contains(data.SQL, "outbox.stats(") {
		s.calls.Add(1)
	}
	return ctx
}

func (s *statsCounter) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// drWorkerPoolCountingStats is a pool logged in as a member of pgdrain_worker only that counts
// its outbox.stats calls.
func drWorkerPoolCountingStats(t *testing.T, q *drQueue) (*pgxpool.Pool, *statsCounter) {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(loginURL(t, q.db, "pgdrain_worker"))
	require.NoError(t, err)
	counter := &statsCounter{}
	cfg.ConnConfig.Tracer = counter
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	return pool, counter
}

// drSeries gathers reg and returns, per metric name, the label sets of its series (as
// "name=value,..." strings, sorted by name as prometheus exports them).
func drSeries(t *testing.T, reg prometheus.Gatherer) map[string][]string {
	t.Helper()
	families, err := reg.Gather()
	require.NoError(t, err)
	series := map[string][]string{}
	for _, f := range families {
		for _, m := range f.GetMetric() {
			series[f.GetName()] = append(series[f.GetName()], drLabels(m))
		}
	}
	return series
}

func drLabels(m *dto.Metric) string {
	var parts []string
	for _, l := range m.GetLabel() {
		parts = append(parts, l.GetName()+"="+l.GetValue())
	}
	return strings.Join(parts, ",")
}

// drWaitExported waits until reg exports the gauges of queue: Run registers once it has read the
// queue's registration.
func drWaitExported(t *testing.T, reg prometheus.Gatherer, queue string) {
	t.Helper()
	drWaitFor(t, 10*time.Second, "the gauges of "+queue, func() bool {
		for _, labels := range drSeries(t, reg)["pgdrain_outbox_backlog_depth"] {
			if labels == "queue="+queue {
				return true
			}
		}
		return false
	})
}

// The gauges come from outbox.stats: backlog depth, age of the oldest pending row, poisoned rows;
// rows leased by the running drainer still count as pending.
func TestDrainer_Metrics_GaugesFromStats(t *testing.T) {
	t.Parallel()
	q := drNewQueue(t, drQueueOpts{maxAttempts: 3})
	for i := range 5 {
		q.enqueue(t, "k", "op", i)
	}
	_, err := q.pool.Exec(context.Background(), `
		UPDATE public.events SET created_at = now() - interval '90 seconds' WHERE id = 1;
		UPDATE public.events SET attempt_count = 3 WHERE id IN (4, 5);`)
	require.NoError(t, err)
	cfg := q.config(drainer.ClaimLease)
	cfg.ApplyTimeout, cfg.Lease = 20*time.Second, time.Minute // the applies below hold until the end
	cfg.ApplyConcurrency = 3
	release := make(chan struct{})
	var started atomic.Int32
	d, reg := drNew(t, loginPool(t, q.db, "pgdrain_worker"), cfg, func(ctx context.Context, _ string, _ drEvent) error {
		started.Add(1)
		select {
		case <-release:
		case <-ctx.Done():
		}
		return drErr("held")
	})
	stop := drStart(t, d)
	defer func() {
		close(release)
		require.NoError(t, stop())
	}()
	drWaitFor(t, 10*time.Second, "the three pending rows in their applies", func() bool { return started.Load() == 3 })
	only := map[string]string{"queue": "public.events"}
	require.Equal(t, 3.0, drMetric(t, reg, "pgdrain_outbox_backlog_depth", only))
	require.Equal(t, 2.0, drMetric(t, reg, "pgdrain_outbox_poisoned", only))
	age := drMetric(t, reg, "pgdrain_outbox_oldest_pending_age_seconds", only)
	require.GreaterOrEqual(t, age, 90.0)
	require.Less(t, age, 150.0)
	require.Equal(t, 0.0, drMetric(t, reg, "pgdrain_outbox_heads_rebuilding", only))
}

// pgdrain_outbox_heads_rebuilding is 1 while claims rebuild the heads after a crash (keys no part
// has reached wait for their part, and the repair pass checks nothing), 0 once the last part is
// done. The drainer here claims nothing (its apply holds), so the heads stay incomplete until the
// test's own claim.
func TestDrainer_Metrics_SayClaimsRebuildTheHeads(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	q := drNewQueue(t, drQueueOpts{partitionColumn: "resource_id"})
	q.enqueue(t, "k", "op", 1)
	// The crash: PostgreSQL empties the unlogged tables.
	forgetHeadsAsACrashDoes(t, q.pool)
	cfg := q.config(drainer.ClaimLease)
	cfg.PollFallback = 100 * time.Millisecond // no part commits to wake it while the lock is held
	d, reg := drNew(t, loginPool(t, q.db, "pgdrain_worker"), cfg, func(context.Context, string, drEvent) error { return nil })
	// Hold the rebuild's lock, which claims try and skip the part without, so that the heads stay
	// incomplete while the drainer runs.
	holder, err := q.pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = holder.Rollback(ctx) }()
	_, err = holder.Exec(ctx, `SELECT pg_advisory_xact_lock(1885823232 + (SELECT queue_id FROM outbox.queues), -1)`)
	require.NoError(t, err)
	stop := drStart(t, d)
	defer func() { require.NoError(t, stop()) }()
	only := map[string]string{"queue": "public.events"}
	drWaitFor(t, 10*time.Second, "the gauge says the heads are being rebuilt", func() bool {
		v, ok := drMetricIfAny(t, reg, "pgdrain_outbox_heads_rebuilding", only)
		return ok && v == 1
	})
	require.NoError(t, holder.Rollback(ctx))
	drWaitFor(t, 10*time.Second, "the row delivered once a claim rebuilt the heads", func() bool { return q.sent(t) == 1 })
	// A part ends after 50 ms: on a slow machine the part that delivered the row may not be the last.
	drWaitFor(t, 10*time.Second, "the gauge says the heads are built", func() bool {
		return drMetric(t, reg, "pgdrain_outbox_heads_rebuilding", only) == 0
	})
}

// Two drainers of one queue and one of another in one process, sharing a Registerer: each queue's
// gauges are exported once and cost one outbox.stats call per scrape, the counters add up both
// drainers' results, and a stopping drainer takes its queue's series with it only when it is the
// queue's last; after the last drainer nothing is left registered.
func TestDrainer_Metrics_OncePerProcessAndGoneOnStop(t *testing.T) {
	t.Parallel()
	q := drNewQueue(t, drQueueOpts{})
	_, err := q.pool.Exec(context.Background(), `SELECT outbox.create_queue('public.jobs')`)
	require.NoError(t, err)
	const rows = 20
	for i := range rows {
		q.enqueue(t, "k", "op", i)
	}
	pool, stats := drWorkerPoolCountingStats(t, q)
	reg := prometheus.NewRegistry()
	ok := func(context.Context, string, drEvent) error { return nil }
	newDrainer := func(queue string) *drainer.Drainer[drEvent] {
		cfg := q.config(drainer.ClaimLease)
		cfg.Table = queue
		d, err := drainer.New(pool, cfg, drDecode, ok,
			drainer.WithLogger[drEvent](drLogger(t)), drainer.WithMetrics[drEvent](reg))
		require.NoError(t, err)
		return d
	}
	a, b := newDrainer("public.events"), newDrainer("public.events")
	stopA, stopB := drStart(t, a), drStart(t, b)
	stopJobs := drStart(t, newDrainer("public.jobs"))
	drWaitExported(t, reg, "public.events")
	drWaitExported(t, reg, "public.jobs")
	// Both drainers of public.events running: a drainer joins the metrics before its first claim,
	// and the series of either one satisfies drWaitExported (on a slow machine B was still checking
	// its indexes when A stopped, and A took the queue's series with it).
	drWaitFor(t, 10*time.Second, "both drainers of public.events claiming", func() bool {
		return !a.Health().LastClaim.IsZero() && !b.Health().LastClaim.IsZero()
	})
	drWaitFor(t, 10*time.Second, "every row sent", func() bool { return q.sent(t) == rows })

	before := stats.calls.Load()
	series := drSeries(t, reg)
	require.Equal(t, int64(2), stats.calls.Load()-before, "one outbox.stats call per queue per scrape")
	for _, g := range drGauges {
		require.Equal(t, []string{"queue=public.events", "queue=public.jobs"}, series[g], g)
	}
	require.Len(t, series["pgdrain_outbox_results_total"], 6, "3 outcomes x 2 queues, each once")
	require.Len(t, series["pgdrain_outbox_lease_lost_total"], 2)
	drWaitFor(t, 5*time.Second, "both drainers' results counted", func() bool {
		return drMetric(t, reg, "pgdrain_outbox_results_total",
			map[string]string{"queue": "public.events", "outcome": "sent"}) == rows
	})

	require.NoError(t, stopA())
	series = drSeries(t, reg)
	for _, g := range drGauges {
		require.Equal(t, []string{"queue=public.events", "queue=public.jobs"}, series[g], "%s: B still drains public.events", g)
	}
	require.Equal(t, float64(rows), drMetric(t, reg, "pgdrain_outbox_results_total",
		map[string]string{"queue": "public.events", "outcome": "sent"}), "A's results stay while B runs")

	require.NoError(t, stopB())
	series = drSeries(t, reg)
	for name, sets := range series {
		for _, labels := range sets {
			require.NotContains(t, labels, "queue=public.events", "%s: public.events has no drainer left", name)
		}
	}
	require.Equal(t, []string{"queue=public.jobs"}, series["pgdrain_outbox_backlog_depth"])

	require.NoError(t, stopJobs())
	require.Empty(t, drSeries(t, reg), "the last drainer unregistered the collector")
}

// A stopped drainer run again registers again, and so does a new drainer of the queue built with
// the same Registerer; both export every metric, each once, every name prefixed pgdrain_ and every
// series labelled queue (never table).
func TestDrainer_Metrics_RestartRegistersAgain(t *testing.T) {
	t.Parallel()
	q := drNewQueue(t, drQueueOpts{})
	pool := loginPool(t, q.db, "pgdrain_worker")
	reg := prometheus.NewRegistry()
	newDrainer := func() *drainer.Drainer[drEvent] {
		d, err := drainer.New(pool, q.config(drainer.ClaimLease), drDecode,
			func(context.Context, string, drEvent) error { return nil },
			drainer.WithLogger[drEvent](drLogger(t)), drainer.WithMetrics[drEvent](reg))
		require.NoError(t, err)
		return d
	}
	checkExported := func(what string) {
		t.Helper()
		drWaitExported(t, reg, "public.events")
		series := drSeries(t, reg)
		var names []string
		for name, sets := range series {
			names = append(names, name)
			require.True(t, strings.HasPrefix(name, "pgdrain_"), "%s: %s is not prefixed pgdrain_", what, name)
			for _, labels := range sets {
				require.Contains(t, labels, "queue=public.events", "%s: %s", what, name)
				require.NotContains(t, labels, "table=", "%s: %s", what, name)
			}
		}
		require.ElementsMatch(t, drMetricNames, names, what)
		for _, g := range drGauges {
			require.Len(t, series[g], 1, "%s: %s", what, g)
		}
	}

	d := newDrainer()
	stop := drStart(t, d)
	checkExported("first run")
	require.NoError(t, stop())
	require.Empty(t, drSeries(t, reg), "stopped: unregistered")

	stop = drStart(t, d)
	checkExported("the same drainer run again")
	require.NoError(t, stop())
	require.Empty(t, drSeries(t, reg))

	stop = drStart(t, newDrainer())
	checkExported("a new drainer of the queue")
	require.NoError(t, stop())
	require.Empty(t, drSeries(t, reg))
}
