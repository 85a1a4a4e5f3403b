package gocheck

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pgdrain/pgdrain/drainer"
)

// A slow apply must not cost the rest of its batch their leases: with two rows applied in parallel,
// one answering at once and one hanging (ignoring its deadline) until well past the lease, the fast
// row's result is recorded before its lease runs out, so it is delivered exactly once and nobody
// else claims it. Without the early flush it was recorded only after the slow one returned, refused
// (lease lost) and delivered again.
func TestDrainer_SlowApplyDoesNotCostItsBatchTheirLeases(t *testing.T) {
	t.Parallel()
	q := drNewQueue(t, drQueueOpts{})
	fast := q.enqueue(t, "a", "fast", 1)
	q.enqueue(t, "b", "slow", 1)

	cfg := q.config(drainer.ClaimLease)
	cfg.ApplyConcurrency, cfg.ApplyTimeout, cfg.Lease = 2, 300*time.Millisecond, 2500*time.Millisecond
	var fastCalls atomic.Int32
	release := make(chan struct{})
	d, _ := drNew(t, q.pool, cfg, func(ctx context.Context, _ string, e drEvent) error {
		if e.Op == "fast" {
			fastCalls.Add(1)
			return nil
		}
		<-release // a peer that ignores the deadline
		return nil
	})
	stop := drStart(t, d)

	// Past the fast row's lease: its result must already be recorded.
	time.Sleep(cfg.Lease + 500*time.Millisecond)
	require.EqualValues(t, 1, q.count(t, `SELECT count(*) FROM public.events WHERE id = $1 AND sent_at IS NOT NULL`, fast),
		"the fast row was recorded while the slow one still ran")
	close(release)
	require.NoError(t, stop())
	require.EqualValues(t, 1, fastCalls.Load(), "the fast row was delivered once")
}
