package gocheck

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pgdrain/pgdrain/drainer"
)

// After a crash (or a promotion) the partition heads are empty, and the first claim rebuilds them
// in one statement, one pass over the pending rows: with a deep backlog that takes longer than
// ClaimTimeout. A claim cut off at its bound rolls the rebuild back, so every attempt did the same
// and the queue stayed stuck (4.3 million rows over 2.1 million keys: 26 s against the default
// 10 s, nothing delivered in minutes). A claim that got no answer from a server that answers pings
// is now given twice as long next time: the rebuild completes and the drain goes on. Here 100,000
// rows over 50,000 keys, whose rebuild takes most of a second, against a ClaimTimeout of 100 ms.
// Run as pgdrain_worker.
func TestDrainer_AHeadsRebuildLongerThanClaimTimeoutCompletes(t *testing.T) {
	t.Parallel()
	drEachMode(t, func(t *testing.T, mode drainer.ClaimMode) {
		q := drNewQueue(t, drQueueOpts{partitionColumn: "partition_key"})
		exec(t, q.pool, `INSERT INTO public.events (event_type, payload, partition_key)
			SELECT 'op', jsonb_build_object('key', 'k' || (g % 50000), 'op', 'op', 'seq', g), 'k' || (g % 50000)
			FROM generate_series(1, 100000) g`)
		exec(t, q.pool, `VACUUM ANALYZE public.events`)
		crashResetAll(t, q.db)
		worker := loginPool(t, q.db, "pgdrain_worker")

		cfg := q.config(mode)
		cfg.ClaimTimeout, cfg.BatchSize = 100*time.Millisecond, 8
		if mode == drainer.ClaimLease {
			cfg.Lease = 3 * time.Second
		}
		var applied atomic.Int64
		logger, buf := drCapture(t)
		d, _ := drNew(t, worker, cfg, func(context.Context, string, drEvent) error {
			applied.Add(1)
			return nil
		}, drainer.WithLogger[drEvent](logger))
		stop := drStart(t, d)
		drWaitFor(t, 60*time.Second, "a first delivery", func() bool { return applied.Load() > 0 })
		require.NoError(t, stop())
		require.Contains(t, buf.String(), "the next claim is given longer")
		var heads int
		require.NoError(t, q.pool.QueryRow(context.Background(), `SELECT count(*)::int FROM outbox.partition_heads`).Scan(&heads))
		require.Greater(t, heads, 40000, "the heads were rebuilt")
		require.False(t, strings.Contains(buf.String(), "permission denied"))
	})
}
