package gocheck

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pgdrain/pgdrain/drainer"
)

// drCapture is a drainer logger that keeps every line (Debug and up) for assertions and prints
// them when the test fails.
func drCapture(t *testing.T) (*slog.Logger, *syncBuffer) {
	t.Helper()
	buf := &syncBuffer{}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("drainer log:\n%s", buf.String())
		}
	})
	return slog.New(slog.NewTextHandler(buf, &slog.HandlerOptions{Level: slog.LevelDebug})), buf
}

// drNoPrivilegeErrors fails when the drainer logged a privilege error or any error at all.
func drNoPrivilegeErrors(t *testing.T, log string) {
	t.Helper()
	require.NotContains(t, log, "permission denied")
	require.NotContains(t, log, "42501")
	require.NotContains(t, log, "level=ERROR")
}

var drShapes = []struct{ name, partition string }{{"unpartitioned", ""}, {"partitioned", "resource_id"}}

// A drainer whose login role is only a member of pgdrain_worker starts (registration through
// outbox.queue_info, the index check), drains a partitioned and an unpartitioned queue in both
// claim modes (rows there at start, then rows announced by NOTIFY), keeps each key's order, exports
// its gauges (outbox.stats), reports wedges (outbox.wedged_partitions), runs its repair pass, and
// logs no privilege error on the way.
func TestDrainer_AsWorker_DrainsEveryShapeInBothModes(t *testing.T) {
	t.Parallel()
	for _, shape := range drShapes {
		t.Run(shape.name, func(t *testing.T) {
			t.Parallel()
			drEachMode(t, func(t *testing.T, mode drainer.ClaimMode) {
				q := drNewQueue(t, drQueueOpts{partitionColumn: shape.partition})
				worker := loginPool(t, q.db, "pgdrain_worker")
				const keys, perKey = 3, 5
				for seq := range perKey {
					for k := range keys {
						q.enqueue(t, fmt.Sprintf("k%d", k), "op", seq)
					}
				}
				var applied drLog
				logger, buf := drCapture(t)
				cfg := q.config(mode)
				cfg.RepairInterval = 200 * time.Millisecond
				var wedgeReports atomic.Int32
				opts := []drainer.Option[drEvent]{drainer.WithLogger[drEvent](logger)}
				if shape.partition != "" {
					cfg.WedgeWarnAfter = 100 * time.Millisecond
					opts = append(opts, drainer.WithWedgeObserver[drEvent](func(context.Context, []drainer.WedgedPartition) {
						wedgeReports.Add(1)
					}))
				}
				d, reg := drNew(t, worker, cfg, func(ctx context.Context, _ string, e drEvent) error {
					applied.add(ctx, e)
					return nil
				}, opts...)
				stop := drStart(t, d)
				drWaitFor(t, 10*time.Second, "the rows there at start", func() bool { return q.sent(t) == keys*perKey })
				// PollFallback is 1m: only the NOTIFY of these inserts can wake the drainer in time.
				for k := range keys {
					q.enqueue(t, fmt.Sprintf("k%d", k), "op", perKey)
				}
				drWaitFor(t, 5*time.Second, "the rows announced by NOTIFY", func() bool { return q.sent(t) == keys*(perKey+1) })
				// Let a few repair passes (and, on the partitioned queue, wedge reports) run as worker.
				time.Sleep(500 * time.Millisecond)

				require.Equal(t, float64(keys*(perKey+1)), drResults(t, reg, "sent"))
				require.Equal(t, 0.0, drMetric(t, reg, "pgdrain_outbox_backlog_depth", nil), "gauges read as worker")
				require.Equal(t, 0.0, drMetric(t, reg, "pgdrain_repairs_total", map[string]string{"cause": "missing_head"}))
				require.NoError(t, stop())

				if shape.partition != "" {
					entries, _ := applied.snapshot()
					last := map[string]int{}
					for _, e := range entries {
						prev, seen := last[e.Key]
						require.True(t, !seen || e.Seq == prev+1, "key %s: seq %d after %d", e.Key, e.Seq, prev)
						last[e.Key] = e.Seq
					}
				}
				log := buf.String()
				drNoPrivilegeErrors(t, log)
				require.NotContains(t, log, "checking the queue's indexes failed")
				require.NotContains(t, log, "repair pass failed")
				require.NotContains(t, log, "reading the next wake-up time")
			})
		})
	}
}

// As worker too, a transient failure is retried when its 300 ms backoff ends: the drainer learns
// the time from outbox.next_due and does not wait for PollFallback (1 minute).
func TestDrainer_AsWorker_WakesWhenABackoffEnds(t *testing.T) {
	t.Parallel()
	for _, shape := range drShapes {
		t.Run(shape.name, func(t *testing.T) {
			t.Parallel()
			drEachMode(t, func(t *testing.T, mode drainer.ClaimMode) {
				q := drNewQueue(t, drQueueOpts{partitionColumn: shape.partition,
					backoffMin: 300 * time.Millisecond, backoffMax: 300 * time.Millisecond})
				worker := loginPool(t, q.db, "pgdrain_worker")
				q.enqueue(t, "k", "op", 1)
				var calls atomic.Int32
				var failedAt, retriedAt atomic.Int64
				logger, buf := drCapture(t)
				cfg := q.config(mode)
				require.Equal(t, time.Minute, cfg.PollFallback)
				d, reg := drNew(t, worker, cfg, func(context.Context, string, drEvent) error {
					if calls.Add(1) == 1 {
						failedAt.Store(time.Now().UnixNano())
						return drErr("peer down")
					}
					retriedAt.CompareAndSwap(0, time.Now().UnixNano())
					return nil
				}, drainer.WithLogger[drEvent](logger))
				stop := drStart(t, d)
				drWaitFor(t, 10*time.Second, "the first, failing apply", func() bool { return failedAt.Load() != 0 })
				drWaitFor(t, 3*time.Second, "the retry sent within 3s of the failure (PollFallback is 1m)",
					func() bool { return q.sent(t) == 1 })
				gap := time.Duration(retriedAt.Load() - failedAt.Load())
				require.GreaterOrEqual(t, gap, 250*time.Millisecond, "the backoff was honoured")
				require.Less(t, gap, 3*time.Second)
				require.EqualValues(t, 2, calls.Load())
				require.Equal(t, 1.0, drResults(t, reg, "transient"))
				require.NoError(t, stop())
				drNoPrivilegeErrors(t, buf.String())
			})
		})
	}
}

// A worker reaches the queue's state only through the functions the drainer calls (queue_info,
// next_due, repair, stats, wedged_partitions, check_indexes). It can not read or change the
// derived state behind them, nor the lease columns that the fencing token guards, nor the registry;
// none of the refused statements changes anything. (TestSecurity_WorkerCanDrainAndNothingElse
// covers the claim and result functions, reading the tables and setting sent_at.)
func TestSecurity_WorkerReachesQueueStateOnlyThroughFunctions(t *testing.T) {
	t.Parallel()
	db := securityFixture(t)
	_, err := db.Pool.Exec(context.Background(), `SELECT count(*) FROM outbox.claim_batch('public.events', 1)`)
	require.NoError(t, err)
	worker := loginAs(t, db, "pgdrain_worker")

	runAs(t, worker, "worker", []roleCall{
		{"read the registration", `SELECT * FROM outbox.queue_info('public.events')`, ""},
		{"read the next due time", `SELECT outbox.next_due('public.events')`, ""},
		{"dry-run the repair pass", `SELECT * FROM outbox.repair('public.events', true)`, ""},
		{"run the repair pass", `SELECT * FROM outbox.repair('public.events')`, ""},
		{"read the gauges", `SELECT * FROM outbox.stats('public.events')`, ""},
		{"read wedged partitions", `SELECT * FROM outbox.wedged_partitions('public.events', '0 seconds')`, ""},
		{"check the indexes", `SELECT * FROM outbox.check_indexes('public.events')`, ""},
		{"registration of a table that is no queue", `SELECT * FROM outbox.queue_info('public.secrets')`, "42P01"},
	})
	before := stateFingerprint(t, db.Pool)
	runAs(t, worker, "worker", []roleCall{
		{"take a lease without a token", `UPDATE public.events SET leased_until = 'infinity'`, "42501"},
		{"drop every lease", `UPDATE public.events SET lease_token = NULL, leased_until = NULL`, "42501"},
		{"reset attempts and backoff", `UPDATE public.events SET attempt_count = 0, next_attempt_at = NULL`, "42501"},
		{"delete events", `DELETE FROM public.events`, "42501"},
		{"truncate the queue table", `TRUNCATE public.events`, "42501"},
		{"move a partition head", `UPDATE outbox.partition_heads SET head_id = NULL, floor_id = 1000000`, "42501"},
		{"delete partition heads", `DELETE FROM outbox.partition_heads`, "42501"},
		{"forge a partition head", `INSERT INTO outbox.partition_heads (queue_id, partition_key) VALUES (1, 'x')`, "42501"},
		{"mark heads unbuilt", `DELETE FROM outbox.partition_heads_built`, "42501"},
		{"read the partition clocks", `SELECT * FROM outbox.partition_clocks`, "42501"},
		{"change the partition clocks", `UPDATE outbox.partition_clocks SET committed_max = 0`, "42501"},
		{"read the repair counts", `SELECT * FROM outbox.repairs`, "42501"},
		{"change the registry", `UPDATE outbox.queues SET max_attempts = 1000`, "42501"},
	})
	require.Equal(t, before, stateFingerprint(t, db.Pool), "refused statements changed nothing")
}

// As worker, a queue that is not registered (or whose table is gone) makes Run fail at once with
// an error matching drainer.ErrQueueNotRegistered that names the queue, not a permission error.
func TestDrainer_AsWorker_UnregisteredQueueIsNamed(t *testing.T) {
	t.Parallel()
	q := drNewQueue(t, drQueueOpts{})
	worker := loginPool(t, q.db, "pgdrain_worker")
	run := func(table string) error {
		cfg := q.config(drainer.ClaimLease)
		cfg.Table = table
		d, _ := drNew(t, worker, cfg, func(context.Context, string, drEvent) error { return nil })
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		return d.Run(ctx)
	}
	err := run("public.nowhere")
	require.ErrorIs(t, err, drainer.ErrQueueNotRegistered)
	require.EqualError(t, err, "queue public.nowhere is not registered (call outbox.create_queue first)")

	_, err = q.pool.Exec(context.Background(), `DROP TABLE public.events`)
	require.NoError(t, err)
	err = run("public.events")
	require.ErrorIs(t, err, drainer.ErrQueueNotRegistered)
	require.ErrorContains(t, err, "queue public.events")
	require.NotContains(t, err.Error(), "permission denied")
}

// RepairInterval: zero takes DefaultRepairInterval, negative turns the pass off, anything between
// zero and MinRepairInterval is refused with an error that starts with the field name.
func TestDrainer_RepairInterval_Validated(t *testing.T) {
	t.Parallel()
	base := drainer.Config{Table: "public.events"}
	for _, ok := range []time.Duration{0, -1, -time.Minute, drainer.MinRepairInterval, drainer.DefaultRepairInterval, time.Hour} {
		c := base
		c.RepairInterval = ok
		require.NoError(t, c.Validate(), "RepairInterval %s", ok)
	}
	for _, bad := range []time.Duration{time.Nanosecond, 50 * time.Millisecond, drainer.MinRepairInterval - 1} {
		c := base
		c.RepairInterval = bad
		err := c.Validate()
		require.Error(t, err, "RepairInterval %s", bad)
		require.True(t, strings.HasPrefix(err.Error(), "RepairInterval must be at least MinRepairInterval (100ms), or negative"), err.Error())
		_, err = drainer.New(drPoolForValidation(t), c, drDecode, func(context.Context, string, drEvent) error { return nil })
		require.Error(t, err)
	}
	require.Equal(t, time.Minute, drainer.DefaultRepairInterval)
}
