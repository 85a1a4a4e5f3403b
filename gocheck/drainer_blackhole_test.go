package gocheck

import (
	"context"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/pgdrain/pgdrain/drainer"
)

// A drainer whose database host vanishes mid-drain without a reset (a proxy that stops
// forwarding and never closes anything) abandons its hung calls after their bound (ClaimTimeout
// for claims and next_due, 10s for a result flush), and once the database is reachable again (the
// proxy forwards new connections) its pool dials again and it drains everything: rows of before,
// during and after the outage (in lock mode, once the server has ended the abandoned claim
// transaction: idle_in_transaction_session_timeout). Without a client-side bound the hung calls would wait for the
// kernel's retransmission timeout (~15 minutes). Run as pgdrain_worker, in both claim modes.
func TestDrainer_BlackholedHost_CallsAbandonedAfterTheirBound(t *testing.T) {
	t.Parallel()
	drEachMode(t, func(t *testing.T, mode drainer.ClaimMode) {
		q := drNewQueue(t, drQueueOpts{})
		const before, after = 300, 50
		drFill(t, q, "before", before)
		direct, err := url.Parse(loginURL(t, q.db, "pgdrain_worker"))
		require.NoError(t, err)
		proxy := startBlackholeProxy(t, direct.Host)
		proxied := *direct
		proxied.Host = proxy.addr()
		qs := proxied.Query()
		// connect_timeout bounds a dial the pool goes on with in the background (docs/failover.md).
		qs.Set("connect_timeout", "2")
		qs.Set("pool_max_conns", "4")
		if mode == drainer.ClaimLock {
			// The server outlives the client here (a partition, not a dead server): the claim
			// transaction the client abandoned keeps its row locks until the server ends it. Bound
			// that as docs/failover.md says: idle_in_transaction_session_timeout for the drainer's
			// role, above LockTransactionTimeout (6s here).
			qs.Set("options", "-cidle_in_transaction_session_timeout=7000")
		}
		proxied.RawQuery = qs.Encode()
		pool, err := pgxpool.New(context.Background(), proxied.String())
		require.NoError(t, err)
		t.Cleanup(pool.Close)

		cfg := q.config(mode)
		cfg.BatchSize, cfg.ClaimTimeout, cfg.PollFallback = 10, time.Second, 500*time.Millisecond
		cfg.ApplyTimeout, cfg.Lease = 500*time.Millisecond, 4*time.Second
		var mu sync.Mutex
		delivered := map[int64]int{}
		logger, buf := drCapture(t)
		d, _ := drNew(t, pool, cfg, func(ctx context.Context, _ string, _ drEvent) error {
			ev, _ := drainer.EventFrom(ctx)
			mu.Lock()
			delivered[ev.ID]++
			mu.Unlock()
			time.Sleep(2 * time.Millisecond) // keep the drain going when the host vanishes
			return nil
		}, drainer.WithLogger[drEvent](logger))
		stop := drStart(t, d)

		drWaitFor(t, 30*time.Second, "the drain under way", func() bool { return q.sent(t) >= 50 })
		proxy.blackhole()
		sentAtHole := q.sent(t)
		require.Less(t, sentAtHole, int64(before), "the host vanished mid-drain")
		drWaitFor(t, 30*time.Second, "a call abandoned after its bound", func() bool {
			return strings.Contains(buf.String(), "did not answer within the call's bound")
		})
		drFill(t, q, "during", after) // written straight to the database meanwhile
		proxy.heal()

		drWaitFor(t, 60*time.Second, "every row sent after the host came back", func() bool {
			return q.sent(t) == before+after
		})
		drFill(t, q, "after", after)
		drWaitFor(t, 30*time.Second, "rows written after the outage sent", func() bool {
			return q.sent(t) == before+2*after
		})
		require.NoError(t, stop())

		mu.Lock()
		defer mu.Unlock()
		require.Len(t, delivered, before+2*after, "every row reached the peer")
		again := 0
		for _, n := range delivered {
			again += n - 1
		}
		t.Logf("blackhole %s: sent when the host vanished %d of %d, delivered again %d (in flight at the outage)",
			mode, sentAtHole, before, again)
		require.NotContains(t, buf.String(), "level=ERROR", "every failure was classified as the database being unavailable")
	})
}
