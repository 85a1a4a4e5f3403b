package gocheck

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pgdrain/pgdrain/drainer"
)

// Shutdown during a batch: the apply in flight keeps a context that the cancellation does not
// reach and its result is recorded; the rows claimed but not started are given back at once
// (released in lease mode, left untouched by the COMMIT in lock mode): no row is half-applied and
// no lease or lock is left behind.
func TestDrainer_ShutdownDuringBatch_RecordsInFlightReleasesTheRest(t *testing.T) {
	t.Parallel()
	drEachMode(t, func(t *testing.T, mode drainer.ClaimMode) {
		q := drNewQueue(t, drQueueOpts{})
		for i := range 4 {
			q.enqueue(t, "k", "op", i)
		}
		cfg := q.config(mode)
		cfg.BatchSize = 4
		started := make(chan struct{})
		var calls atomic.Int32
		var innerCancelled atomic.Bool
		var applied drLog
		d, reg := drNew(t, q.pool, cfg, func(ctx context.Context, _ string, e drEvent) error {
			if calls.Add(1) == 1 {
				close(started)
			}
			time.Sleep(300 * time.Millisecond) // Run's ctx is cancelled meanwhile
			innerCancelled.Store(ctx.Err() != nil)
			applied.add(ctx, e)
			return nil
		})
		stop := drStart(t, d)
		<-started
		require.NoError(t, stop(), "Run returns nil on a graceful stop")

		require.EqualValues(t, 1, calls.Load(), "no apply starts after the cancellation")
		require.False(t, innerCancelled.Load(), "the apply in flight was not cancelled")
		_, ids := applied.snapshot()
		require.Len(t, ids, 1)
		var sentIDs []int64
		rows, err := q.pool.Query(context.Background(), `SELECT id FROM public.events WHERE sent_at IS NOT NULL ORDER BY id`)
		require.NoError(t, err)
		for rows.Next() {
			var id int64
			require.NoError(t, rows.Scan(&id))
			sentIDs = append(sentIDs, id)
		}
		require.NoError(t, rows.Err())
		require.Equal(t, ids, sentIDs, "exactly the applied row is recorded")
		require.Equal(t, 1.0, drResults(t, reg, "sent"))
		require.EqualValues(t, 0, q.count(t, `SELECT count(*) FROM public.events
			WHERE sent_at IS NULL AND (attempt_count <> 0 OR lease_token IS NOT NULL OR leased_until IS NOT NULL)`),
			"the unstarted rows are untouched: no attempt, no lease")
		require.EqualValues(t, 3, drClaimCount(t, q.pool, mode, q.table, 10), "the unstarted rows are claimable at once")
	})
}

// drListenerPID returns the pid of the LISTEN backend the drainers on q's pool share once it has
// LISTENed (0 if none).
func drListenerPID(t *testing.T, q *drQueue) int32 {
	t.Helper()
	var pid int32
	err := q.pool.QueryRow(context.Background(), `
		SELECT coalesce(max(pid), 0) FROM pg_stat_activity
		WHERE datname = current_database() AND pid = $1 AND query LIKE 'LISTEN%'`,
		int64(drainer.ListenerPID(q.pool))).Scan(&pid)
	require.NoError(t, err)
	return pid
}

// An idle drainer is woken by the insert's NOTIFY: the event is applied long before
// PollFallback (a minute here; the bound is generous, this is about correctness, not speed).
func TestDrainer_NotifyWakesAnIdleDrainer(t *testing.T) {
	t.Parallel()
	drEachMode(t, func(t *testing.T, mode drainer.ClaimMode) {
		q := drNewQueue(t, drQueueOpts{})
		var calls atomic.Int32
		d, _ := drNew(t, q.pool, q.config(mode), func(context.Context, string, drEvent) error {
			calls.Add(1)
			return nil
		})
		drStart(t, d)
		drWaitFor(t, 10*time.Second, "the LISTEN connection", func() bool { return drListenerPID(t, q) != 0 })
		time.Sleep(200 * time.Millisecond) // let the first (empty) claim finish: the drainer is idle
		q.enqueue(t, "k", "op", 1)
		drWaitFor(t, 15*time.Second, "the event applied (PollFallback is 1m)", func() bool { return q.sent(t) == 1 })
		require.EqualValues(t, 1, calls.Load())
	})
}

// The LISTEN connection is killed with pg_terminate_backend: the drainer reconnects on a new
// backend, and NOTIFY wakes it again.
func TestDrainer_ListenConnectionKilled_Reconnects(t *testing.T) {
	t.Parallel()
	drEachMode(t, func(t *testing.T, mode drainer.ClaimMode) {
		q := drNewQueue(t, drQueueOpts{})
		d, _ := drNew(t, q.pool, q.config(mode), func(context.Context, string, drEvent) error { return nil })
		drStart(t, d)
		var first int32
		drWaitFor(t, 10*time.Second, "the LISTEN connection", func() bool { first = drListenerPID(t, q); return first != 0 })
		var killed bool
		require.NoError(t, q.pool.QueryRow(context.Background(), `SELECT pg_terminate_backend($1)`, first).Scan(&killed))
		require.True(t, killed)
		q.enqueue(t, "k", "op", 1) // NOTIFY lost while disconnected: the reconnect claims
		drWaitFor(t, 15*time.Second, "a new LISTEN connection", func() bool {
			pid := drListenerPID(t, q)
			return pid != 0 && pid != first
		})
		drWaitFor(t, 15*time.Second, "the event sent during the outage", func() bool { return q.sent(t) == 1 })
		time.Sleep(200 * time.Millisecond)
		q.enqueue(t, "k", "op", 2)
		drWaitFor(t, 15*time.Second, "the event sent after reconnecting (PollFallback is 1m)", func() bool { return q.sent(t) == 2 })
	})
}

// A transient failure is retried when its backoff ends, without a NOTIFY and long before
// PollFallback: the drainer sleeps until the earliest backoff of the queue.
func TestDrainer_WakesWhenTheEarliestBackoffEnds(t *testing.T) {
	t.Parallel()
	for _, partition := range []string{"", "resource_id"} {
		name := map[string]string{"": "unpartitioned", "resource_id": "partitioned"}[partition]
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			drEachMode(t, func(t *testing.T, mode drainer.ClaimMode) {
				q := drNewQueue(t, drQueueOpts{partitionColumn: partition, backoffMin: 300 * time.Millisecond, backoffMax: 300 * time.Millisecond})
				q.enqueue(t, "k", "op", 1)
				var calls atomic.Int32
				d, reg := drNew(t, q.pool, q.config(mode), func(context.Context, string, drEvent) error {
					if calls.Add(1) == 1 {
						return drErr("peer down")
					}
					return nil
				})
				drStart(t, d)
				drWaitFor(t, 15*time.Second, "the retry sent (PollFallback is 1m)", func() bool { return q.sent(t) == 1 })
				require.EqualValues(t, 2, calls.Load())
				require.Equal(t, 1.0, drResults(t, reg, "transient"))
			})
		})
	}
}

// ApplyConcurrency > 1: a batch's rows are applied at the same time and their results go back in
// ONE statement (a statement-level trigger on the queue counts the statements that mark rows sent).
func TestDrainer_ApplyConcurrency_ParallelApplies_OneResultRoundTrip(t *testing.T) {
	t.Parallel()
	const n = 8
	drEachMode(t, func(t *testing.T, mode drainer.ClaimMode) {
		q := drNewQueue(t, drQueueOpts{})
		ctx := context.Background()
		_, err := q.pool.Exec(ctx, `
			CREATE TABLE public.sent_statements (n bigserial PRIMARY KEY, sent_rows bigint NOT NULL);
			CREATE FUNCTION public.count_sent() RETURNS trigger LANGUAGE plpgsql AS $$
			BEGIN
			  INSERT INTO public.sent_statements (sent_rows)
			  SELECT count(*) FROM new_rows WHERE sent_at IS NOT NULL HAVING count(*) > 0;
			  RETURN NULL;
			END $$;
			CREATE TRIGGER count_sent AFTER UPDATE ON public.events REFERENCING NEW TABLE AS new_rows
			  FOR EACH STATEMENT EXECUTE FUNCTION public.count_sent();
			INSERT INTO public.events (event_type, payload) SELECT 'op', '{}' FROM generate_series(1, 8);`)
		require.NoError(t, err)
		var inFlight, maxInFlight atomic.Int32
		all := make(chan struct{})
		cfg := q.config(mode)
		cfg.ApplyConcurrency = n
		cfg.ApplyTimeout, cfg.Lease = 5*time.Second, 0
		d, _ := drNew(t, q.pool, cfg, func(ctx context.Context, _ string, _ drEvent) error {
			cur := inFlight.Add(1)
			defer inFlight.Add(-1)
			for m := maxInFlight.Load(); cur > m && !maxInFlight.CompareAndSwap(m, cur); m = maxInFlight.Load() {
			}
			if cur == n {
				close(all)
			}
			select {
			case <-all:
			case <-time.After(3 * time.Second):
			}
			return nil
		})
		stop := drStart(t, d)
		drWaitFor(t, 15*time.Second, "all rows sent", func() bool { return q.sent(t) == n })
		require.NoError(t, stop())
		require.EqualValues(t, n, maxInFlight.Load(), "the batch's rows were applied in parallel")
		var perStatement []int64
		rows, err := q.pool.Query(ctx, `SELECT sent_rows FROM public.sent_statements ORDER BY n`)
		require.NoError(t, err)
		for rows.Next() {
			var c int64
			require.NoError(t, rows.Scan(&c))
			perStatement = append(perStatement, c)
		}
		require.NoError(t, rows.Err())
		require.Equal(t, []int64{n}, perStatement, "one statement recorded the whole batch")
	})
}
