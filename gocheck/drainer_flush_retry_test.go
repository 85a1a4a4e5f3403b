package gocheck

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/pgdrain/pgdrain/drainer"
)

// A lease-mode result flush (outbox.apply_results) whose connection dies (pg_terminate_backend:
// 57P01, as in a restart or a switchover) is retried while the rows' leases last: every row is
// recorded by the first delivery, none is delivered again after its lease. To catch the flush in
// the act, the test holds the rows' locks while the applies return, so apply_results waits on them
// until its backend is terminated. Run as pgdrain_worker.
func TestDrainer_LeaseFlushRetriedAfterItsConnectionDied(t *testing.T) {
	t.Parallel()
	q := drNewQueue(t, drQueueOpts{})
	const rows = 8
	drFill(t, q, "op", rows)
	worker := loginPool(t, q.db, "pgdrain_worker")
	ctx := context.Background()

	cfg := q.config(drainer.ClaimLease)
	// A lease long enough for the retries (the flush waits on the test's locks meanwhile), so a
	// dropped result would show as a second delivery once it ends.
	cfg.ApplyConcurrency, cfg.ApplyTimeout, cfg.Lease = rows, 5*time.Second, 20*time.Second
	gate := make(chan struct{})
	var mu sync.Mutex
	applies := map[int64]int{}
	logger, buf := drCapture(t)
	d, reg := drNew(t, worker, cfg, func(ctx context.Context, _ string, _ drEvent) error {
		ev, _ := drainer.EventFrom(ctx)
		mu.Lock()
		applies[ev.ID]++
		mu.Unlock()
		<-gate
		return nil
	}, drainer.WithLogger[drEvent](logger))
	stop := drStart(t, d)
	drWaitFor(t, 20*time.Second, "every row in an apply", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(applies) == rows
	})

	// Lock every row (as the queue's owner), then let the applies return: the flush blocks.
	tx, err := q.pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	_, err = tx.Exec(ctx, `SELECT id FROM public.events FOR UPDATE`)
	require.NoError(t, err)
	close(gate)
	var pid int32
	drWaitFor(t, 20*time.Second, "the flush waiting for the test's locks", func() bool {
		err := q.pool.QueryRow(ctx, `SELECT pid FROM pg_stat_activity
			WHERE datname = current_database() AND query LIKE '%outbox.apply_results%' AND wait_event_type = 'Lock'
			  AND pid <> pg_backend_pid()`).Scan(&pid)
		return err == nil
	})
	var terminated bool
	require.NoError(t, q.pool.QueryRow(ctx, `SELECT pg_terminate_backend($1)`, pid).Scan(&terminated))
	require.True(t, terminated)
	// The drainer logs the failure before it retries; keep the locks until then so that the
	// killed flush is the one that ran, not a later one.
	drWaitFor(t, 20*time.Second, "the retry logged", func() bool {
		return strings.Contains(buf.String(), "retrying while their leases last")
	})
	require.NoError(t, tx.Rollback(ctx))

	drWaitFor(t, 20*time.Second, "every row recorded", func() bool { return q.sent(t) == rows })
	require.NoError(t, stop())
	mu.Lock()
	defer mu.Unlock()
	for id, n := range applies {
		require.Equal(t, 1, n, "row %d delivered once: its result was recorded by the retried flush", id)
	}
	require.Equal(t, float64(rows), drResults(t, reg, "sent"))
	require.Equal(t, 0.0, drMetric(t, reg, "pgdrain_outbox_lease_lost_total", nil))
	require.Contains(t, buf.String(), "57P01")
	require.NotContains(t, buf.String(), "level=ERROR")
}

// A lease-mode result flush cancelled by the server's own timeouts (the drainer's role has a
// lock_timeout or a statement_timeout shorter than a wait for the rows' locks) is retried while
// the rows' leases last, like a flush whose connection died: every row is recorded by its first
// delivery. Such a flush used to be dropped at once (logged at Error), and its rows were delivered
// again when their leases ended. Run as pgdrain_worker.
func TestDrainer_LeaseFlushRetriedAfterTheServersTimeouts(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ setting, code string }{
		{"lock_timeout", "55P03"},
		{"statement_timeout", "57014"},
	} {
		t.Run(c.setting, func(t *testing.T) {
			t.Parallel()
			q := drNewQueue(t, drQueueOpts{})
			const rows = 8
			drFill(t, q, "op", rows)
			ctx := context.Background()
			login := loginPool(t, q.db, "pgdrain_worker")
			_, err := q.pool.Exec(ctx, `ALTER ROLE `+login.Config().ConnConfig.User+` SET `+c.setting+` = '200ms'`)
			require.NoError(t, err)
			worker, err := pgxpool.New(ctx, login.Config().ConnString())
			require.NoError(t, err)
			t.Cleanup(worker.Close)

			cfg := q.config(drainer.ClaimLease)
			cfg.ApplyConcurrency, cfg.ApplyTimeout, cfg.Lease = rows, 5*time.Second, 20*time.Second
			gate := make(chan struct{})
			var mu sync.Mutex
			applies := map[int64]int{}
			logger, buf := drCapture(t)
			d, reg := drNew(t, worker, cfg, func(ctx context.Context, _ string, _ drEvent) error {
				ev, _ := drainer.EventFrom(ctx)
				mu.Lock()
				applies[ev.ID]++
				mu.Unlock()
				<-gate
				return nil
			}, drainer.WithLogger[drEvent](logger))
			stop := drStart(t, d)
			drWaitFor(t, 20*time.Second, "every row in an apply", func() bool {
				mu.Lock()
				defer mu.Unlock()
				return len(applies) == rows
			})

			// Lock every row (as the queue's owner), then let the applies return: the flush waits
			// for the locks until the server's timeout cancels it.
			tx, err := q.pool.Begin(ctx)
			require.NoError(t, err)
			defer func() { _ = tx.Rollback(ctx) }()
			_, err = tx.Exec(ctx, `SELECT id FROM public.events FOR UPDATE`)
			require.NoError(t, err)
			close(gate)
			drWaitFor(t, 20*time.Second, "the retry logged", func() bool {
				log := buf.String()
				return strings.Contains(log, "retrying while their leases last") && strings.Contains(log, c.code)
			})
			require.NoError(t, tx.Rollback(ctx))

			drWaitFor(t, 20*time.Second, "every row recorded", func() bool { return q.sent(t) == rows })
			require.NoError(t, stop())
			mu.Lock()
			defer mu.Unlock()
			for id, n := range applies {
				require.Equal(t, 1, n, "row %d delivered once: its result was recorded by a retried flush", id)
			}
			require.Equal(t, float64(rows), drResults(t, reg, "sent"))
			require.NotContains(t, buf.String(), "level=ERROR")
		})
	}
}
