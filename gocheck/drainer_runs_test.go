package gocheck

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/stretchr/testify/require"

	"github.com/pgdrain/pgdrain/drainer"
)

// With RunLength a claim takes each partition's head with the rows after it (claim_runs,
// claim_locked_runs), and one slot applies a run in its partition's order, stopping at its first
// failure: the rest is given back untouched (lease mode) or left unsettled (lock mode), so the
// partition is delivered in order with no row applied out of turn. 8 keys x 10 rows, the fourth
// row of every key failing once: each key sees exactly 0 1 2 3(fails) 3 4 ... 9. Without
// failures, one slot applies the first claim's first run whole before anything else: k0's rows 0
// to 4 come first, where a claim of one row per partition would have gone on with k1's row 0.
// Run as pgdrain_worker.
func TestDrainer_Runs_KeepKeyOrderAndStopAtTheFirstFailure(t *testing.T) {
	t.Parallel()
	t.Run("failing once", func(t *testing.T) { t.Parallel(); drRuns(t, true) })
	t.Run("all sent", func(t *testing.T) { t.Parallel(); drRuns(t, false) })
}

func drRuns(t *testing.T, failOnce bool) {
	drEachMode(t, func(t *testing.T, mode drainer.ClaimMode) {
		q := drNewQueue(t, drQueueOpts{partitionColumn: "partition_key"})
		const keys, perKey = 8, 10
		for i := range perKey {
			for k := range keys {
				q.enqueue(t, fmt.Sprintf("k%d", k), "op", i)
			}
		}
		worker := loginPool(t, q.db, "pgdrain_worker")

		var mu sync.Mutex
		seen := map[string][]int{}
		var order []string // every apply, in the order the one slot ran them
		failed := map[string]bool{}
		cfg := q.config(mode)
		cfg.BatchSize, cfg.RunLength = 40, 5
		logger, buf := drCapture(t)
		d, reg := drNew(t, worker, cfg, func(_ context.Context, _ string, e drEvent) error {
			mu.Lock()
			defer mu.Unlock()
			seen[e.Key] = append(seen[e.Key], e.Seq)
			order = append(order, fmt.Sprintf("%s/%d", e.Key, e.Seq))
			if failOnce && e.Seq == 3 && !failed[e.Key] {
				failed[e.Key] = true
				return fmt.Errorf("first attempt of %s/3 fails", e.Key)
			}
			return nil
		}, drainer.WithLogger[drEvent](logger))
		stop := drStart(t, d)
		drWaitFor(t, 20*time.Second, "every row sent", func() bool { return q.sent(t) == keys*perKey })
		require.NoError(t, stop())

		want := []int{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}
		if failOnce {
			want = []int{0, 1, 2, 3, 3, 4, 5, 6, 7, 8, 9}
		}
		mu.Lock()
		for k := range keys {
			key := fmt.Sprintf("k%d", k)
			require.Equal(t, want, seen[key], "key %s: delivered in order, the run stopped at its failure", key)
		}
		if !failOnce {
			require.Equal(t, []string{"k0/0", "k0/1", "k0/2", "k0/3", "k0/4"}, order[:5],
				"the first run is applied whole, in its partition's order, before any other partition's row")
		}
		mu.Unlock()
		require.Equal(t, float64(keys*perKey), drResults(t, reg, "sent"))
		drNoPrivilegeErrors(t, buf.String())
	})
}

// A row of a run that another session holds locked ends the run before it (never a wait, never a
// row out of turn): lease mode gives back what it leased past it, lock mode leaves it out.
func TestClaimRuns_ARowLockedElsewhereEndsItsRun(t *testing.T) {
	t.Parallel()
	q := drNewQueue(t, drQueueOpts{partitionColumn: "partition_key"})
	var ids []int64
	for i := range 4 {
		ids = append(ids, q.enqueue(t, "a", "op", i))
	}
	ctx := context.Background()
	for _, mode := range []string{"lease", "lock"} {
		holder, err := q.pool.Begin(ctx)
		require.NoError(t, err)
		_, err = holder.Exec(ctx, `SELECT 1 FROM public.events WHERE id = $1 FOR NO KEY UPDATE`, ids[2])
		require.NoError(t, err)

		claimer, err := q.pool.Begin(ctx)
		require.NoError(t, err)
		_, err = claimer.Exec(ctx, `SET LOCAL lock_timeout = '2s'`)
		require.NoError(t, err)
		sql := `SELECT id FROM outbox.claim_runs('public.events', 10, '30 seconds', 10)`
		if mode == "lock" {
			sql = `SELECT id FROM outbox.claim_locked_runs('public.events', 10, 10)`
		}
		rows, err := claimer.Query(ctx, sql)
		require.NoError(t, err)
		got, err := pgx.CollectRows(rows, pgx.RowTo[int64])
		require.NoError(t, err, "%s: the claim does not wait for the lock", mode)
		require.Equal(t, ids[:2], got, "%s: the run ends before the locked row", mode)
		var leased []int64
		require.NoError(t, claimer.QueryRow(ctx,
			`SELECT coalesce(array_agg(id ORDER BY id), '{}') FROM public.events WHERE lease_token IS NOT NULL`).Scan(&leased))
		if mode == "lease" {
			require.Equal(t, ids[:2], leased, "lease mode: nothing past the locked row stays leased")
		} else {
			require.Empty(t, leased, "lock mode writes no lease")
		}
		require.NoError(t, claimer.Rollback(ctx))
		require.NoError(t, holder.Rollback(ctx))
	}
}

// A run leased by claim_runs when the queue table is truncated (with and without RESTART
// IDENTITY, so the new rows may take the run's ids again): the run's results, sent late with
// their tokens, record nothing, and the rows written after the TRUNCATE are claimed as runs and
// delivered in their order, as pgdrain_worker. Nothing is left leased or pending.
func TestClaimRuns_TruncateWhileARunIsLeased(t *testing.T) {
	t.Parallel()
	for _, truncate := range []string{"TRUNCATE public.events", "TRUNCATE public.events RESTART IDENTITY"} {
		t.Run(truncate, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			q := drNewQueue(t, drQueueOpts{partitionColumn: "partition_key"})
			worker := loginPool(t, q.db, "pgdrain_worker")
			for i := range 3 {
				q.enqueue(t, "a", "old", i)
			}
			type leased struct {
				id    int64
				token pgtype.UUID
			}
			claimRun := func() []leased {
				rows, err := worker.Query(ctx, `SELECT id, lease_token FROM outbox.claim_runs('public.events', 10, '30 seconds', 10)`)
				require.NoError(t, err)
				got, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (leased, error) {
					var l leased
					return l, r.Scan(&l.id, &l.token)
				})
				require.NoError(t, err)
				return got
			}
			record := func(run []leased) int {
				ids, tokens := make([]int64, len(run)), make([]pgtype.UUID, len(run))
				outcomes := make([]string, len(run))
				for i, l := range run {
					ids[i], tokens[i], outcomes[i] = l.id, l.token, "sent"
				}
				var recorded int
				require.NoError(t, worker.QueryRow(ctx, `SELECT count(*) FILTER (WHERE applied)
					FROM outbox.apply_results('public.events', $1, $2, $3)`, ids, tokens, outcomes).Scan(&recorded))
				return recorded
			}
			old := claimRun()
			require.Len(t, old, 3, "the run takes the key's three rows")

			exec(t, q.pool, truncate)
			var fresh []int64
			for i := range 3 {
				fresh = append(fresh, q.enqueue(t, "a", "new", i))
			}
			require.Zero(t, record(old), "the truncated run's results record nothing")

			run := claimRun()
			require.Len(t, run, 3, "the new rows are one run")
			for i, l := range run {
				require.Equal(t, fresh[i], l.id, "in their order")
			}
			require.Equal(t, 3, record(run))
			require.Zero(t, q.count(t, `SELECT count(*) FROM public.events WHERE sent_at IS NULL OR lease_token IS NOT NULL`),
				"nothing is left pending or leased")
		})
	}
}
