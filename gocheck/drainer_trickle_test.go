package gocheck

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/pgdrain/pgdrain/drainer"
)

// While rows trickle in, a drainer claims at most once per TrickleInterval (issue 29 item 4: a
// claim and its results cost nearly as much for one row as for several, and a drainer that claimed
// after every row cost the producers beside it a third of their speed). Rows of new keys arrive
// every 5 ms for a second: with TrickleInterval 100 ms the drainer needs at most a few dozen claims
// (about one per 100 ms, and the busy poll's empty ones at the end); with it off (the control,
// which shows the count can fail) it claims once or more per row. Every row is delivered either
// way, as pgdrain_worker.
func TestDrainer_TrickleInterval_PacesClaimsWhileRowsTrickleIn(t *testing.T) {
	t.Parallel()
	drEachMode(t, func(t *testing.T, mode drainer.ClaimMode) {
		for _, c := range []struct {
			name    string
			trickle time.Duration
			check   func(t *testing.T, claims float64)
		}{
			{"paced", 100 * time.Millisecond, func(t *testing.T, n float64) {
				require.LessOrEqual(t, n, 30.0, "a drainer paced at 100 ms claims about ten times a second")
			}},
			{"off", -1, func(t *testing.T, n float64) {
				require.GreaterOrEqual(t, n, 60.0, "without pacing the drainer claims again after every row")
			}},
		} {
			t.Run(c.name, func(t *testing.T) {
				q := drNewQueue(t, drQueueOpts{partitionColumn: "resource_id"})
				worker := loginPool(t, q.db, "pgdrain_worker")
				cfg := q.config(mode)
				cfg.TrickleInterval = c.trickle
				d, reg := drNew(t, worker, cfg, func(context.Context, string, drEvent) error { return nil })
				const rows = 200
				drTrickleIn(t, q, rows, d)
				claims := drMetric(t, reg, "pgdrain_outbox_claim_duration_seconds", map[string]string{"mode": mode.String()})
				t.Logf("%s, TrickleInterval %s: %v claims for %d rows", mode, c.trickle, claims, rows)
				c.check(t, claims)
			})
		}
	})
}

// Replicas of one queue take turns to claim while rows trickle in (outbox.claim_turn): three
// drainers paced at 100 ms claim together about as often as one, not three times as often (issue
// 29: each replica's claim found a third of the rows, and the producers beside them paid for every
// claim). The control drops the queue's turn, so that outbox.claim_turn always answers "now" and
// each replica paces alone, as before: the same count must then fail. As pgdrain_worker.
func TestDrainer_TrickleInterval_ReplicasTakeTurns(t *testing.T) {
	t.Parallel()
	drEachMode(t, func(t *testing.T, mode drainer.ClaimMode) {
		for _, c := range []struct {
			name  string
			turns bool
			check func(t *testing.T, claims float64)
		}{
			{"turns", true, func(t *testing.T, n float64) {
				require.LessOrEqual(t, n, 40.0, "three replicas taking turns claim about ten times a second together")
			}},
			{"each alone", false, func(t *testing.T, n float64) {
				require.GreaterOrEqual(t, n, 50.0, "three replicas pacing alone claim about thirty times a second, and in between")
			}},
			{"no right to take turns", true, func(t *testing.T, n float64) {
				require.GreaterOrEqual(t, n, 50.0, "replicas that may not call claim_turn pace alone, and still deliver every row")
			}},
		} {
			t.Run(c.name, func(t *testing.T) {
				q := drNewQueue(t, drQueueOpts{partitionColumn: "resource_id"})
				if !c.turns {
					var drop string
					require.NoError(t, q.pool.QueryRow(context.Background(),
						`SELECT format('DROP SEQUENCE outbox.claim_turn_q%s', queue_id) FROM outbox.queues`).Scan(&drop))
					_, err := q.pool.Exec(context.Background(), drop)
					require.NoError(t, err)
				}
				if c.name == "no right to take turns" {
					_, err := q.pool.Exec(context.Background(), `REVOKE EXECUTE ON FUNCTION outbox.claim_turn(text, interval) FROM pgdrain_worker`)
					require.NoError(t, err)
				}
				worker := loginPool(t, q.db, "pgdrain_worker")
				cfg := q.config(mode)
				cfg.TrickleInterval = 100 * time.Millisecond
				var ds []*drainer.Drainer[drEvent]
				var regs []prometheus.Gatherer
				for range 3 {
					d, reg := drNew(t, worker, cfg, func(context.Context, string, drEvent) error { return nil })
					ds, regs = append(ds, d), append(regs, reg)
				}
				const rows = 300
				drTrickleIn(t, q, rows, ds...)
				var claims float64
				for _, reg := range regs {
					claims += drMetric(t, reg, "pgdrain_outbox_claim_duration_seconds", map[string]string{"mode": mode.String()})
				}
				t.Logf("%s, three replicas, %s: %v claims for %d rows", mode, c.name, claims, rows)
				c.check(t, claims)
			})
		}
	})
}

// A partition with rows waiting behind its head is claimed again at once, however long the
// TrickleInterval: each claim of a single hot key finds one row (fewer than it asks for), but the
// claim before found the same partition. 300 rows of one key with TrickleInterval 1s drain in
// seconds (paced, they would take five minutes), in key order, as pgdrain_worker.
func TestDrainer_TrickleInterval_ABusyPartitionIsNotPaced(t *testing.T) {
	t.Parallel()
	drEachMode(t, func(t *testing.T, mode drainer.ClaimMode) {
		q := drNewQueue(t, drQueueOpts{partitionColumn: "resource_id"})
		const rows = 300
		for i := range rows {
			q.enqueue(t, "hot", "op", i)
		}
		worker := loginPool(t, q.db, "pgdrain_worker")
		cfg := q.config(mode)
		cfg.TrickleInterval = time.Second
		var mu sync.Mutex
		var seen []int
		d, _ := drNew(t, worker, cfg, func(_ context.Context, _ string, e drEvent) error {
			mu.Lock()
			defer mu.Unlock()
			seen = append(seen, e.Seq)
			return nil
		})
		stop := drStart(t, d)
		drWaitFor(t, 30*time.Second, "the hot key's rows are delivered without pauses", func() bool { return q.sent(t) == rows })
		require.NoError(t, stop())
		require.Len(t, seen, rows)
		for i, s := range seen {
			require.Equal(t, i, s, "the key's rows in order")
		}
	})
}

// A full claim of rows that all arrived since the drainer's last claim with rows is paced like a
// claim that found fewer than it asked for: at a trickle that fills a claim (ApplyConcurrency 8 at
// 400 rows/s fills one in 20 ms), claiming again at once found a row or two, and such a drainer
// made half as many claims and results again as it needed. Bursts of exactly a claim's worth of
// rows (4, ApplyConcurrency 4) every 100 ms for two seconds, TrickleInterval 100 ms: about one
// claim per burst. A full claim that found a row left behind by the claim before is still followed
// at once (TestDrainer_TrickleInterval_ABacklogIsNotPaced). As pgdrain_worker.
func TestDrainer_TrickleInterval_AFullClaimOfNewRowsIsPaced(t *testing.T) {
	t.Parallel()
	drEachMode(t, func(t *testing.T, mode drainer.ClaimMode) {
		q := drNewQueue(t, drQueueOpts{partitionColumn: "resource_id"})
		worker := loginPool(t, q.db, "pgdrain_worker")
		cfg := q.config(mode)
		cfg.ApplyConcurrency = 4
		cfg.TrickleInterval = 100 * time.Millisecond
		d, reg := drNew(t, worker, cfg, func(context.Context, string, drEvent) error { return nil })
		stop := drStart(t, d)
		const bursts, size = 20, 4
		for b := range bursts {
			drEnqueueTogether(t, q, b*size, size)
			time.Sleep(100 * time.Millisecond)
		}
		drWaitFor(t, 10*time.Second, "every row is delivered", func() bool { return q.sent(t) == bursts*size })
		require.NoError(t, stop())
		claims := drMetric(t, reg, "pgdrain_outbox_claim_duration_seconds", map[string]string{"mode": mode.String()})
		t.Logf("%s: %v claims for %d bursts of %d rows", mode, claims, bursts, size)
		require.LessOrEqual(t, claims, 2.0*bursts, "about one claim per burst, not a full one and then more")
	})
}

// A full claim that found a row the claim before it left behind is followed at once, however long
// the TrickleInterval: 400 rows of distinct keys, ApplyConcurrency 4, TrickleInterval 1 s, drain in
// seconds (paced, they would take 100 s). Also when the rows' created_at comes from a clock an hour
// ahead of the server's (an application that sets it): such a time says nothing about the queue.
// As pgdrain_worker.
func TestDrainer_TrickleInterval_ABacklogIsNotPaced(t *testing.T) {
	t.Parallel()
	drEachMode(t, func(t *testing.T, mode drainer.ClaimMode) {
		for _, ahead := range []time.Duration{0, time.Hour} {
			t.Run(fmt.Sprintf("created_at ahead by %s", ahead), func(t *testing.T) {
				q := drNewQueue(t, drQueueOpts{partitionColumn: "resource_id"})
				const rows = 400
				drEnqueueTogether(t, q, 0, rows)
				_, err := q.pool.Exec(context.Background(), fmt.Sprintf(
					"UPDATE %s SET created_at = created_at + $1::interval", q.table), ahead.String())
				require.NoError(t, err)
				worker := loginPool(t, q.db, "pgdrain_worker")
				cfg := q.config(mode)
				cfg.ApplyConcurrency = 4
				cfg.TrickleInterval = time.Second
				d, _ := drNew(t, worker, cfg, func(context.Context, string, drEvent) error { return nil })
				stop := drStart(t, d)
				drWaitFor(t, 30*time.Second, "the backlog is delivered without pauses", func() bool { return q.sent(t) == rows })
				require.NoError(t, stop())
			})
		}
	})
}

// drEnqueueTogether commits n rows of new keys k<from>..k<from+n-1> in one statement (drEvent
// payloads, as q.enqueue writes them).
func drEnqueueTogether(t *testing.T, q *drQueue, from, n int) {
	t.Helper()
	_, err := q.pool.Exec(context.Background(), `
		SELECT outbox.enqueue($1, 'op', jsonb_build_object('key', 'k' || g, 'op', 'op', 'seq', g), 'k' || g)
		FROM generate_series($2::int, $2::int + $3::int - 1) g`, q.table, from, n)
	require.NoError(t, err)
}
