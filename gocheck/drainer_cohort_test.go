package gocheck

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pgdrain/pgdrain/drainer"
	"github.com/pgdrain/pgdrain/internal/cohort"
)

// A drainer tells a batching Applier (the relay's) which applies it started together: the five
// rows of one claim, applied in five slots, carry one cohort, which is complete once each of them
// has counted itself in, and not before. The relay then sends a batch of them without waiting
// for BatchLinger. Run as pgdrain_worker, both claim modes.
func TestDrainer_AppliesStartedTogetherShareACohort(t *testing.T) {
	drEachMode(t, func(t *testing.T, mode drainer.ClaimMode) {
		q := drNewQueue(t, drQueueOpts{})
		const rows = 5
		drFill(t, q, "op", rows)
		worker := loginPool(t, q.db, "pgdrain_worker")

		cfg := q.config(mode)
		cfg.ApplyConcurrency, cfg.ApplyTimeout, cfg.Lease = 8, 5*time.Second, 0
		var mu sync.Mutex
		seen := map[*cohort.Cohort]int{}
		var completeEarly bool
		arrived := make(chan struct{})
		d, _ := drNew(t, worker, cfg, func(ctx context.Context, _ string, _ drEvent) error {
			c := cohort.From(ctx)
			mu.Lock()
			if c != nil {
				if c.Complete() {
					completeEarly = true
				}
				// Counted in under mu, before arrived can close: a member woken by the close must
				// find every member in.
				c.Done()
				seen[c]++
				if seen[c] == rows {
					close(arrived)
				}
			}
			mu.Unlock()
			if c == nil {
				return nil
			}
			// Hold the slot until every member has counted itself in: the five are applied at
			// the same time, in one claim (lock mode: one transaction).
			select {
			case <-arrived:
			case <-ctx.Done():
				return ctx.Err()
			}
			assert.True(t, c.Complete())
			return nil
		})
		stop := drStart(t, d)
		drWaitFor(t, 20*time.Second, "every row sent", func() bool { return q.sent(t) == rows })
		require.NoError(t, stop())

		mu.Lock()
		defer mu.Unlock()
		require.Len(t, seen, 1, "one cohort for the five rows of one claim: %v", seen)
		for _, n := range seen {
			require.Equal(t, rows, n)
		}
		require.False(t, completeEarly, "a cohort was complete before its members counted themselves in")
	})
}
