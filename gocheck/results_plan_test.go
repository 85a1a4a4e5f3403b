package gocheck

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"
)

// A result's cost must not grow with the queue's heads (invariant 6, "not with stale statistics"),
// in a database of many queues: outbox.partition_heads holds every queue's heads, and analyzed
// while each queue had a handful it told the planner that one queue has about three. The heads
// refresh of apply_results then updated a result's heads by walking every head of its queue and
// comparing each with each result's key (a drain of 10,000 keys: 80,000 rows compared for a result
// of 8, 23 ms), and deleted emptied heads the same way; the heads' queue_id and partition_key now
// carry n_distinct (1 and -1), which every ANALYZE keeps. Measured as plan work (rows produced and
// discarded by every node, auto_explain), as pgdrain_worker, at 1,000 and 8,000 keys: a result of
// 8 rows of keys with more rows behind them (their heads move on), of keys whose last row it is
// (their heads go), and a claim that applies 8 wake notes (outbox._apply_wakes moves their heads).
func TestResults_WorkDoesNotGrowWithTheQueuesHeads(t *testing.T) {
	t.Parallel()
	db := newPlanDB(t)
	ctx := context.Background()
	// Forty queues of five keys each, analyzed: the statistics of a database of many small queues.
	for i := range 40 {
		q := newQueue(t, db.Pool, fmt.Sprintf("public.small_%d", i), true)
		fillInterleaved(t, db.Pool, q, 5, 5)
	}
	exec(t, db.Pool, "ANALYZE outbox.partition_heads")
	exec(t, db.Pool, "ALTER TABLE outbox.partition_heads SET (autovacuum_enabled = false)")

	const batch = 8
	work := map[string]map[int]float64{"heads move on": {}, "heads go": {}, "wake notes": {}}
	for _, keys := range []int{1000, 8000} {
		for s, shape := range []string{"heads move on", "heads go", "wake notes"} {
			queue := newQueue(t, db.Pool, fmt.Sprintf("public.results_%d_%d", keys, s), true)
			perKey := rowsPerKey
			if shape == "heads go" {
				perKey = 1
			}
			fillInterleaved(t, db.Pool, queue, keys*perKey, keys)
			exec(t, db.Pool, "ANALYZE "+queue)
			conn, planWork := planWorkConn(t, db, "pgdrain_worker")
			claim := func() (ids []int64, tokens []string) {
				require.NoError(t, conn.QueryRow(ctx,
					"SELECT array_agg(id), array_agg(lease_token::text) FROM outbox.claim_batch($1, $2)", queue, batch).Scan(&ids, &tokens))
				require.Len(t, ids, batch)
				return ids, tokens
			}
			record := func(ids []int64, tokens []string) {
				_, err := conn.Exec(ctx, "SELECT outbox.apply_results($1, $2, $3::uuid[], array_fill('sent'::text, ARRAY[$4::int]))",
					queue, ids, tokens, len(ids))
				require.NoError(t, err)
			}
			// A first cycle plans the session's statements (as a drainer's first claim does).
			record(claim())
			ids, tokens := claim()
			if shape == "wake notes" {
				record(ids, tokens)
				// Wake notes of 8 keys whose heads exist, as producers leave them when a claim
				// held the head while they committed.
				exec(t, db.Pool, `INSERT INTO outbox.partition_wakes (queue_id, partition_key, low_id)
					SELECT h.queue_id, h.partition_key, h.head_id FROM outbox.partition_heads h
					JOIN outbox.queues q USING (queue_id) WHERE q.queue = $1 AND h.head_id IS NOT NULL
					ORDER BY h.partition_key LIMIT 8`, queue)
				planWork()
				ids, tokens = claim()
				work[shape][keys] = planWork()
				record(ids, tokens)
			} else {
				planWork()
				record(ids, tokens)
				work[shape][keys] = planWork()
			}
			require.Positive(t, work[shape][keys], "auto_explain reported no plan")
			t.Logf("%d keys, %s: plan work %.0f rows", keys, shape, work[shape][keys])
		}
	}
	for shape, byKeys := range work {
		require.LessOrEqual(t, byKeys[8000], 1.5*byKeys[1000],
			"%s: the plan work of a call grew with the queue's heads: %.0f rows at 8,000 keys, %.0f at 1,000",
			shape, byKeys[8000], byKeys[1000])
	}
}
