package gocheck

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/pgdrain/pgdrain/drainer"
	"github.com/pgdrain/pgdrain/internal/lastscrape"
)

// A lease-mode result flush (outbox.apply_results) whose connection dies (pg_terminate_backend:
// 57P01, as in a restart or a switchover) is retried while the rows' leases last: every row is
// recorded by the first delivery, none is delivered again after its lease. To catch the flush in
// the act, the test holds the rows' locks while the applies return, so apply_results waits on them
// until its backend is terminated. Run as pgdrain_worker.
func TestDrainer_LeaseFlushRetriedAfterItsConnectionDied(t *testing.T) {
	t.Parallel()
	q := drNewQueue(t, drQueueOpts{})
	f := startHeldFlush(t, q, loginPool(t, q.db, "pgdrain_worker"))
	ctx, buf, reg, stop, tx := context.Background(), f.buf, f.reg, f.stop, f.tx
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

	drWaitFor(t, 20*time.Second, "every row recorded", func() bool { return q.sent(t) == heldFlushRows })
	require.NoError(t, stop())
	f.requireDeliveredOnce(t)
	require.Equal(t, float64(heldFlushRows), drResults(t, reg, "sent"))
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
			ctx := context.Background()
			login := loginPool(t, q.db, "pgdrain_worker")
			_, err := q.pool.Exec(ctx, `ALTER ROLE `+login.Config().ConnConfig.User+` SET `+c.setting+` = '200ms'`)
			require.NoError(t, err)
			worker, err := pgxpool.New(ctx, login.Config().ConnString())
			require.NoError(t, err)
			t.Cleanup(worker.Close)
			f := startHeldFlush(t, q, worker)
			buf, reg, stop, tx := f.buf, f.reg, f.stop, f.tx
			drWaitFor(t, 20*time.Second, "the retry logged", func() bool {
				log := buf.String()
				return strings.Contains(log, "retrying while their leases last") && strings.Contains(log, c.code)
			})
			require.NoError(t, tx.Rollback(ctx))

			drWaitFor(t, 20*time.Second, "every row recorded", func() bool { return q.sent(t) == heldFlushRows })
			require.NoError(t, stop())
			f.requireDeliveredOnce(t)
			require.Equal(t, float64(heldFlushRows), drResults(t, reg, "sent"))
			require.NotContains(t, buf.String(), "level=ERROR")
		})
	}
}

// heldFlushRows is how many rows startHeldFlush drains.
const heldFlushRows = 8

// heldFlush is a lease-mode drain whose result flush waits for row locks the test holds.
type heldFlush struct {
	tx      pgx.Tx // holds every row's lock, as the queue's owner
	buf     *syncBuffer
	reg     *lastscrape.Registry
	stop    func() error
	mu      sync.Mutex
	applies map[int64]int
}

// startHeldFlush fills q with heldFlushRows rows and drains them through pool in lease mode, with a
// lease long enough for the retries (a dropped result would show as a second delivery once it
// ends). Once every row is in an apply it locks every row (as the queue's owner) and lets the
// applies return: the flush then waits for the locks.
func startHeldFlush(t *testing.T, q *drQueue, pool *pgxpool.Pool) *heldFlush {
	t.Helper()
	ctx := context.Background()
	drFill(t, q, "op", heldFlushRows)
	cfg := q.config(drainer.ClaimLease)
	cfg.ApplyConcurrency, cfg.ApplyTimeout, cfg.Lease = heldFlushRows, 5*time.Second, 20*time.Second
	f := &heldFlush{applies: map[int64]int{}}
	gate := make(chan struct{})
	logger, buf := drCapture(t)
	d, reg := drNew(t, pool, cfg, func(ctx context.Context, _ string, _ drEvent) error {
		ev, _ := drainer.EventFrom(ctx)
		f.mu.Lock()
		f.applies[ev.ID]++
		f.mu.Unlock()
		<-gate
		return nil
	}, drainer.WithLogger[drEvent](logger))
	f.buf, f.reg, f.stop = buf, reg, drStart(t, d)
	drWaitFor(t, 20*time.Second, "every row in an apply", func() bool {
		f.mu.Lock()
		defer f.mu.Unlock()
		return len(f.applies) == heldFlushRows
	})
	tx, err := q.pool.Begin(ctx)
	require.NoError(t, err)
	t.Cleanup(func() { _ = tx.Rollback(ctx) })
	_, err = tx.Exec(ctx, `SELECT id FROM public.events FOR UPDATE`)
	require.NoError(t, err)
	f.tx = tx
	close(gate)
	return f
}

// requireDeliveredOnce checks that every row was applied once: its result was recorded by a
// retried flush.
func (f *heldFlush) requireDeliveredOnce(t *testing.T) {
	t.Helper()
	f.mu.Lock()
	defer f.mu.Unlock()
	for id, n := range f.applies {
		require.Equal(t, 1, n, "row %d delivered once: its result was recorded by a retried flush", id)
	}
}
