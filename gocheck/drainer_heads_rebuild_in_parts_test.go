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

// After a crash (or a promotion) the partition heads are empty and claims rebuild them. In one
// statement a deep backlog's rebuild took longer than ClaimTimeout (4.3 million rows over 2.1
// million keys: 26 s against the default 10 s), a lock-mode claim cut off at its bound rolled it
// back, and so did every later one: the queue stayed stuck. Each claim now rebuilds one part, 50 ms
// of keys, committed with it. Here 150,000 rows over 75,000 keys, whose rebuild takes about a
// second, against a ClaimTimeout of 300 ms: the drain starts, no claim is cut off, and the heads
// end up built. Run as pgdrain_worker.
func TestDrainer_HeadsRebuiltAfterACrashInPartsShorterThanClaimTimeout(t *testing.T) {
	t.Parallel()
	drEachMode(t, func(t *testing.T, mode drainer.ClaimMode) {
		q := drNewQueue(t, drQueueOpts{partitionColumn: "partition_key"})
		exec(t, q.pool, `INSERT INTO public.events (event_type, payload, partition_key)
			SELECT 'op', jsonb_build_object('key', 'k' || (g % 75000), 'op', 'op', 'seq', g), 'k' || (g % 75000)
			FROM generate_series(1, 150000) g`)
		exec(t, q.pool, `VACUUM ANALYZE public.events`)
		crashResetAll(t, q.db)
		worker := loginPool(t, q.db, "pgdrain_worker")

		cfg := q.config(mode)
		cfg.ClaimTimeout, cfg.BatchSize = 300*time.Millisecond, 8
		if mode == drainer.ClaimLease {
			cfg.Lease = 3 * time.Second
		}
		var applied atomic.Int64
		logger, buf := drCapture(t)
		d, reg := drNew(t, worker, cfg, func(context.Context, string, drEvent) error {
			applied.Add(1)
			return nil
		}, drainer.WithLogger[drEvent](logger))
		stop := drStart(t, d)
		built := func() bool {
			var ok bool
			require.NoError(t, q.pool.QueryRow(context.Background(),
				`SELECT EXISTS (SELECT 1 FROM outbox.partition_heads_built)`).Scan(&ok))
			return ok
		}
		drWaitFor(t, 60*time.Second, "the heads built", built)
		require.NoError(t, stop())
		require.Positive(t, applied.Load(), "the drain went on")
		var heads int
		require.NoError(t, q.pool.QueryRow(context.Background(), `SELECT count(*)::int FROM outbox.partition_heads`).Scan(&heads))
		require.Greater(t, heads, 70000, "a head per key")
		// A part is about 50 ms of work: a claim cut off at 300 ms is the machine's load, not the
		// rebuild; before, every claim was. Counted are the claims' timeouts (a result flush cut off
		// on a loaded machine is no claim: a CI run had 2 claims and 1 flush), against the claims
		// that succeeded: at most 2, or one in 20 of a long drain.
		cut := 0
		for _, line := range strings.Split(buf.String(), "\n") {
			if strings.Contains(line, "deadline exceeded") && strings.Contains(line, "claiming batch") {
				cut++
			}
		}
		claims := int(drMetric(t, reg, "pgdrain_outbox_claim_duration_seconds", map[string]string{"mode": mode.String()}))
		t.Logf("%d claims, %d cut off at ClaimTimeout", claims, cut)
		require.LessOrEqual(t, cut, max(2, claims/20), "claims cut off at ClaimTimeout (%d claims)", claims)
		require.False(t, strings.Contains(buf.String(), "permission denied"))
	})
}
