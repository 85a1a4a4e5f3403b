package gocheck

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pgdrain/pgdrain/drainer"
)

// Lease lost mid-apply: drainer A's peer ignores its deadline and answers after A's lease ended;
// meanwhile drainer B re-claimed the row with a new token. A's late result is refused by the
// token while B still holds the row (nothing in it changes), counted as lease lost, and the row is
// recorded once, by B.
func TestDrainer_LeaseLostMidApply_LateResultRefused(t *testing.T) {
	t.Parallel()
	q := drNewQueue(t, drQueueOpts{})
	id := q.enqueue(t, "k", "slow", 1)

	cfgA := q.config(drainer.ClaimLease)
	cfgA.ApplyTimeout, cfgA.Lease = 200*time.Millisecond, 1300*time.Millisecond
	// A holds one row at a time, so while its apply hangs it claims nothing: B re-claims the row.
	cfgA.BatchSize = 1
	started := make(chan struct{})
	var callsA atomic.Int32
	var deadlineA time.Duration
	var ctxErrA error
	dA, regA := drNew(t, q.pool, cfgA, func(ctx context.Context, _ string, e drEvent) error {
		callsA.Add(1)
		begin := time.Now()
		dl, _ := ctx.Deadline()
		deadlineA = dl.Sub(begin)
		close(started)
		time.Sleep(2 * time.Second) // a peer that ignores the deadline
		ctxErrA = ctx.Err()
		return errors.New("peer answered 504 late")
	})
	stopA := drStart(t, dA)
	<-started

	cfgB := q.config(drainer.ClaimLease)
	cfgB.ApplyTimeout, cfgB.Lease = 5*time.Second, 0
	var callsB atomic.Int32
	var leaseLostSeenByB atomic.Bool
	dB, regB := drNew(t, q.pool, cfgB, func(ctx context.Context, _ string, e drEvent) error {
		callsB.Add(1)
		// Hold the row until A's late result has been refused, so the token alone refused it.
		for range 250 {
			if drMetric(t, regA, "pgdrain_outbox_lease_lost_total", nil) == 1 {
				leaseLostSeenByB.Store(true)
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
		return nil
	})
	stopB := drStart(t, dB)
	drWaitFor(t, 15*time.Second, "the row sent", func() bool { return q.sent(t) == 1 })
	require.NoError(t, stopB())
	require.NoError(t, stopA())

	require.LessOrEqual(t, deadlineA, cfgA.ApplyTimeout, "A's apply deadline is bounded")
	require.ErrorIs(t, ctxErrA, context.DeadlineExceeded, "A's apply ctx ended long before the peer answered")
	require.True(t, leaseLostSeenByB.Load(), "A's result arrived while B held the row")
	require.EqualValues(t, 1, callsA.Load())
	require.EqualValues(t, 1, callsB.Load())
	var attempts int
	var lastErr *string
	require.NoError(t, q.pool.QueryRow(context.Background(),
		`SELECT attempt_count, last_error FROM public.events WHERE id = $1`, id).Scan(&attempts, &lastErr))
	require.Equal(t, 0, attempts, "the refused transient result counted no attempt")
	require.Nil(t, lastErr, "the refused result wrote no error")
	require.Equal(t, 1.0, drMetric(t, regA, "pgdrain_outbox_lease_lost_total", nil))
	require.Equal(t, 0.0, drResults(t, regA, "transient")+drResults(t, regA, "sent"))
	require.Equal(t, 1.0, drResults(t, regB, "sent"), "recorded once, by the new holder")
	require.Equal(t, 0.0, drMetric(t, regB, "pgdrain_outbox_lease_lost_total", nil))
}

// When earlier applies of a batch used up the lease, the drainer extends a row's lease before
// applying it, so every apply still gets its full ApplyTimeout and no result is lost.
func TestDrainer_LeaseExtendedForLateRowsOfABatch(t *testing.T) {
	t.Parallel()
	q := drNewQueue(t, drQueueOpts{})
	for i := range 5 {
		q.enqueue(t, "k", "slowish", i)
	}
	cfg := q.config(drainer.ClaimLease)
	cfg.ApplyTimeout, cfg.Lease = 300*time.Millisecond, 1500*time.Millisecond // 500ms of lease per batch
	var shortest atomic.Int64
	shortest.Store(int64(time.Hour))
	d, reg := drNew(t, q.pool, cfg, func(ctx context.Context, _ string, e drEvent) error {
		dl, _ := ctx.Deadline()
		if left := int64(time.Until(dl)); left < shortest.Load() {
			shortest.Store(left)
		}
		time.Sleep(200 * time.Millisecond)
		return nil
	})
	stop := drStart(t, d)
	drWaitFor(t, 10*time.Second, "all rows sent", func() bool { return q.sent(t) == 5 })
	require.NoError(t, stop())
	require.Equal(t, 5.0, drResults(t, reg, "sent"))
	require.Equal(t, 0.0, drMetric(t, reg, "pgdrain_outbox_lease_lost_total", nil))
	require.Greater(t, time.Duration(shortest.Load()), 250*time.Millisecond,
		"every apply started with (about) its full ApplyTimeout: the lease was extended")
}
