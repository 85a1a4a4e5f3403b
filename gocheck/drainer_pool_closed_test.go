package gocheck

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/pgdrain/pgdrain/drainer"
)

// A pool closed under a running drainer (pool.Close while Run runs) ends Run with an error
// matching drainer.ErrPoolClosed, in either claim mode and with a TxApplier: nothing can reach the
// database through that pool again. Run went on claiming and logging "claiming batch failed" at
// Error until its ctx ended before.
func TestDrainer_APoolClosedWhileRowsFlowEndsRun(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name string
		mode drainer.ClaimMode
		tx   bool
	}{
		{"lease", drainer.ClaimLease, false},
		{"lock", drainer.ClaimLock, false},
		{"lock_tx_applier", drainer.ClaimLock, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			const rows = 500
			q := drNewQueue(t, drQueueOpts{})
			_, err := q.pool.Exec(context.Background(), `
				SELECT outbox.enqueue('public.events', 'op', jsonb_build_object('key', 'k' || g, 'op', 'op', 'seq', g))
				FROM generate_series(1, $1) g`, rows)
			require.NoError(t, err)
			pool := pcOwnPool(t, q)
			logger, logs := drCapture(t)
			cfg := q.config(c.mode)
			cfg.ApplyConcurrency = 2
			opts := []drainer.Option[drEvent]{drainer.WithLogger[drEvent](logger)}
			apply := func(context.Context, string, drEvent) error {
				time.Sleep(10 * time.Millisecond)
				return nil
			}
			if c.tx {
				cfg.BatchSize = 4
				opts = append(opts, drainer.WithTxApplier[drEvent](func(context.Context, pgx.Tx, []drainer.TxEvent) error {
					time.Sleep(10 * time.Millisecond)
					return nil
				}))
				apply = nil
			}
			d, err := drainer.New(pool, cfg, drDecode, apply, opts...)
			require.NoError(t, err)
			ended := pcRun(t, d)
			drWaitFor(t, 10*time.Second, "rows flowing", func() bool { return q.sent(t) >= 20 })

			closed := time.Now()
			pcClose(t, pool)
			err = pcEnded(t, ended)
			require.ErrorIs(t, err, drainer.ErrPoolClosed)
			require.ErrorContains(t, err, "closed pool", "the pool's own error, and the call that met it")
			require.Less(t, time.Since(closed), 5*time.Second, "Run returned promptly (ApplyTimeout is 500ms)")
			require.Less(t, q.sent(t), int64(rows), "the pool was closed while rows were flowing")
			require.NotContains(t, logs.String(), "claiming batch failed")
			require.NotContains(t, logs.String(), "draining batch failed")
		})
	}
}

// An idle drainer meets its closed pool at its next wake-up: here the NOTIFY of a row enqueued
// through another pool (its LISTEN connection, hijacked from the pool, outlives Close), long
// before PollFallback (a minute).
func TestDrainer_APoolClosedUnderAnIdleDrainerEndsRunAtItsNextWakeUp(t *testing.T) {
	t.Parallel()
	drEachMode(t, func(t *testing.T, mode drainer.ClaimMode) {
		q := drNewQueue(t, drQueueOpts{})
		pool := pcOwnPool(t, q)
		logger, logs := drCapture(t)
		var calls atomic.Int32
		d, err := drainer.New(pool, q.config(mode), drDecode, func(context.Context, string, drEvent) error {
			calls.Add(1)
			return nil
		}, drainer.WithLogger[drEvent](logger))
		require.NoError(t, err)
		ended := pcRun(t, d)
		drWaitFor(t, 10*time.Second, "the LISTEN connection", func() bool { return drainer.ListenerPID(pool) != 0 })
		time.Sleep(200 * time.Millisecond) // let the first (empty) claim finish: the drainer is idle

		pcClose(t, pool)
		q.enqueue(t, "k", "op", 1)
		err = pcEnded(t, ended)
		require.ErrorIs(t, err, drainer.ErrPoolClosed)
		require.Zero(t, calls.Load(), "nothing was claimed through the closed pool")
		require.Zero(t, q.sent(t))
		require.NotContains(t, logs.String(), "level=ERROR")
	})
}

// A pool closed before Run starts is the same error, at once: Run does not retry a closed pool as
// an unavailable database.
func TestDrainer_APoolClosedBeforeRunIsErrPoolClosedAtOnce(t *testing.T) {
	t.Parallel()
	q := drNewQueue(t, drQueueOpts{})
	pool := pcOwnPool(t, q)
	pool.Close()
	d, err := drainer.New(pool, q.config(drainer.ClaimLease), drDecode,
		func(context.Context, string, drEvent) error { return nil }, drainer.WithLogger[drEvent](drLogger(t)))
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	start := time.Now()
	err = d.Run(ctx)
	require.ErrorIs(t, err, drainer.ErrPoolClosed)
	require.ErrorContains(t, err, "pinging database")
	require.False(t, errors.Is(err, context.DeadlineExceeded))
	require.Less(t, time.Since(start), 2*time.Second)
}

// pcOwnPool is a pool of q's database for the drainer alone, which the check closes (q.pool stays
// open for the check's own queries).
func pcOwnPool(t *testing.T, q *drQueue) *pgxpool.Pool {
	t.Helper()
	pool, err := pgxpool.New(context.Background(), q.db.URL)
	require.NoError(t, err)
	t.Cleanup(pool.Close) // a second Close is a no-op
	return pool
}

// pcRun runs d on a ctx that ends only with the test, and returns where Run's error arrives.
func pcRun(t *testing.T, d *drainer.Drainer[drEvent]) <-chan error {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	ended := make(chan error, 1)
	returned := make(chan struct{})
	go func() {
		defer close(returned)
		ended <- d.Run(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case <-returned:
		case <-time.After(30 * time.Second):
		}
	})
	return ended
}

// pcClose closes pool as its owner would, failing the check if Close (which waits for the
// connections in use to come back) takes longer than a batch could.
func pcClose(t *testing.T, pool *pgxpool.Pool) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		pool.Close()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("pool.Close did not return within 10s: the drainer holds a connection")
	}
}

// pcEnded waits for Run to return on its own (its ctx has not ended) and returns its error.
func pcEnded(t *testing.T, ended <-chan error) error {
	t.Helper()
	select {
	case err := <-ended:
		require.Error(t, err, "Run returned nil, as if stopped")
		return err
	case <-time.After(10 * time.Second):
		t.Fatal("Run still running 10s after its pool was closed")
		return nil
	}
}
