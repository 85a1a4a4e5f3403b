package gocheck

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
)

// The hostile states of invariant 6 (issue 5): each must keep one claim within hostileFactor times
// the buffers of the healthy 1,000-row queue, and each is shown hostile by seed 001's claim
// (requireSeedClaimCollapses), which walks the blocked, parked or poisoned rows.

// exec runs sql (one or more statements, no arguments) and fails the test on error.
func exec(t *testing.T, pool *pgxpool.Pool, sql string, args ...any) {
	t.Helper()
	_, err := pool.Exec(context.Background(), sql, args...)
	require.NoError(t, err, sql)
}

// Test_ClaimPlan_StaleStatistics_DoesNotCollapse is seed 001's decoy regression: the table was
// analyzed while empty (the planner expects rows=1), autovacuum is off for it, a decoy
// (created_at) WHERE sent_at IS NULL index exists, and a burst of 8,600 rows over 1,439 keys
// arrives (the seed's numbers; live, the seed's claim took 6,990 ms instead of 29 ms).
func Test_ClaimPlan_StaleStatistics_DoesNotCollapse(t *testing.T) {
	t.Parallel()
	db := newPlanDB(t)
	base := healthyBaseline(t, db.Pool, true)
	exec(t, db.Pool, "ALTER TABLE outbox.partition_heads SET (autovacuum_enabled = false)")
	q := newQueue(t, db.Pool, "public.stale", true)
	exec(t, db.Pool, `ALTER TABLE public.stale SET (autovacuum_enabled = false);
		CREATE INDEX stale_decoy ON public.stale (created_at) WHERE sent_at IS NULL;
		ANALYZE public.stale`)
	fillInterleaved(t, db.Pool, q, 8_600, 1_439)

	got := measureClaim(t, db.Pool, q, claimBatchSize)
	require.EqualValues(t, claimBatchSize, got.Rows)
	requireFlat(t, "stale stats + decoy, burst 8,600 rows / 1,439 keys", got, base)
	requireSeedClaimCollapses(t, db.Pool, "stale stats + decoy", q, base)
}

// Test_ClaimPlan_CheckIndexes_NamesTheDecoy: the extra (created_at) WHERE sent_at IS NULL index
// is reported by name, and a queue with exactly the required indexes reports nothing.
func Test_ClaimPlan_CheckIndexes_NamesTheDecoy(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := newPlanDB(t)
	q := newQueue(t, db.Pool, "public.decoyed", true)
	var clean int
	require.NoError(t, db.Pool.QueryRow(ctx, "SELECT count(*) FROM outbox.check_indexes($1)", q).Scan(&clean))
	require.Zero(t, clean, "create_queue builds exactly the required indexes")

	exec(t, db.Pool, "CREATE INDEX decoyed_created_pending ON public.decoyed (created_at) WHERE sent_at IS NULL")
	rows, err := db.Pool.Query(ctx, "SELECT problem, index_name FROM outbox.check_indexes($1)", q)
	require.NoError(t, err)
	var found [][2]string
	for rows.Next() {
		var problem, name string
		require.NoError(t, rows.Scan(&problem, &name))
		found = append(found, [2]string{problem, name})
	}
	require.NoError(t, rows.Err())
	require.Equal(t, [][2]string{{"decoy", "decoyed_created_pending"}}, found)
}

// Test_ClaimPlan_HotKeys_LeasedHeads_EmptyClaimIsCheap: 10 keys with 10,000 rows each, every head
// leased. Nothing is claimable, and finding that out must not walk the 99,990 blocked successors
// (the prototype did: about 400,000 buffer hits per claim, on every NOTIFY).
func Test_ClaimPlan_HotKeys_LeasedHeads_EmptyClaimIsCheap(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := newPlanDB(t)
	base := healthyBaseline(t, db.Pool, true)
	q := newQueue(t, db.Pool, "public.hot", true)
	fillInterleaved(t, db.Pool, q, 100_000, 10)
	analyze(t, db.Pool, q)
	var leased int
	require.NoError(t, db.Pool.QueryRow(ctx, "SELECT count(*) FROM outbox.claim_batch($1, 32)", q).Scan(&leased))
	require.Equal(t, 10, leased, "one head per key is claimable")

	got := measureClaim(t, db.Pool, q, claimBatchSize)
	require.Zero(t, got.Rows)
	requireFlat(t, "hot keys 10 x 10,000, heads leased (empty claim)", got, base)
	requireSeedClaimCollapses(t, db.Pool, "hot keys, heads leased", q, base)
}

// Test_ClaimPlan_HeadsInBackoff_DoNotCost: 3,000 keys whose heads failed transiently and back off
// for an hour cost nothing, whether or not other keys have ready rows.
func Test_ClaimPlan_HeadsInBackoff_DoNotCost(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := newPlanDB(t)
	base := healthyBaseline(t, db.Pool, true)
	q := "public.backoff"
	exec(t, db.Pool, "SELECT outbox.create_queue($1, 'resource_id', 10, '1 hour', '2 hours')", q)
	fillInterleaved(t, db.Pool, q, 9_000, 3_000)
	analyze(t, db.Pool, q)
	var ids []int64
	var tokens []string
	require.NoError(t, db.Pool.QueryRow(ctx,
		"SELECT array_agg(id), array_agg(lease_token::text) FROM outbox.claim_batch($1, 10000)", q).Scan(&ids, &tokens))
	require.Len(t, ids, 3_000, "one head per key")
	var failed int
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE applied) FROM outbox.apply_results($1, $2, $3::uuid[],
		array_fill('transient'::text, ARRAY[cardinality($2::bigint[])]))`, q, ids, tokens).Scan(&failed))
	require.Equal(t, 3_000, failed)

	idle := measureClaim(t, db.Pool, q, claimBatchSize)
	require.Zero(t, idle.Rows)
	requireFlat(t, "3,000 heads in backoff, nothing ready (empty claim)", idle, base)

	insertRows(t, db.Pool, q, 1_000, "'fresh-' || (g % 166)")
	analyze(t, db.Pool, q)
	got := measureClaim(t, db.Pool, q, claimBatchSize)
	require.EqualValues(t, claimBatchSize, got.Rows)
	requireFlat(t, "3,000 heads in backoff + 1,000 ready rows", got, base)
	requireSeedClaimCollapses(t, db.Pool, "heads in backoff", q, base)
}

// Test_ClaimPlan_PoisonedBacklog_Spread_DoesNotCost: poisoned rows keep sent_at IS NULL, so they
// stay in both required indexes. 20,000 rows over 10,000 keys, poisoned through apply_results,
// must not be walked by a claim of the 1,000 ready rows beside them. Measured right after the
// storm, before a vacuum removed the row versions it left (analyzed, so the planner knows the
// rows are there); after a vacuum seed 001's claim copes with this state, ours must cope with both.
func Test_ClaimPlan_PoisonedBacklog_Spread_DoesNotCost(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := newPlanDB(t)
	base := healthyBaseline(t, db.Pool, true)
	q := newQueue(t, db.Pool, "public.poisoned_spread", true)
	fillInterleaved(t, db.Pool, q, 20_000, 10_000)
	for round := 0; round < 2; round++ {
		var ids []int64
		var tokens []string
		require.NoError(t, db.Pool.QueryRow(ctx,
			"SELECT array_agg(id), array_agg(lease_token::text) FROM outbox.claim_batch($1, 10000)", q).Scan(&ids, &tokens))
		require.Len(t, ids, 10_000, "one head per key")
		exec(t, db.Pool, `SELECT count(*) FROM outbox.apply_results($1, $2, $3::uuid[],
			array_fill('permanent'::text, ARRAY[cardinality($2::bigint[])]))`, q, ids, tokens)
	}
	insertRows(t, db.Pool, q, 1_000, "'fresh-' || (g % 166)")
	analyze(t, db.Pool, q)
	got := measureClaim(t, db.Pool, q, claimBatchSize)
	require.EqualValues(t, claimBatchSize, got.Rows)
	requireFlat(t, "20,000 poisoned over 10,000 keys + 1,000 ready", got, base)
	// No control here: with two poisoned rows per key seed 001's predicate copies fine once the
	// storm's dead versions are pruned, so this state pins our cost without claiming it is hostile.
	logSeedClaim(t, db.Pool, "poisoned spread", q, base)
}

// Test_ClaimPlan_PoisonedBacklog_AheadOfLiveRows_DoesNotCost: 10 hot keys whose first 2,000 rows
// each were poisoned (a long run of permanent failures), with live rows behind them. The FIFO
// check of each hot key's head must not visit its 2,000 poisoned predecessors. The poisoned state
// is written directly (what 20,000 permanent outcomes leave) and vacuumed, so the claim is not
// charged for the setup's dead row versions.
func Test_ClaimPlan_PoisonedBacklog_AheadOfLiveRows_DoesNotCost(t *testing.T) {
	t.Parallel()
	db := newPlanDB(t)
	base := healthyBaseline(t, db.Pool, true)
	q := newQueue(t, db.Pool, "public.poisoned_hot", true)
	fillInterleaved(t, db.Pool, q, 20_000, 10)
	exec(t, db.Pool, `UPDATE public.poisoned_hot SET attempt_count = 10, last_error = 'permanent';
		SELECT outbox._rebuild_heads(queue_id) FROM outbox.queues WHERE queue = 'public.poisoned_hot'`)
	fillInterleaved(t, db.Pool, q, 1_000, 10)
	insertRows(t, db.Pool, q, 1_000, "'fresh-' || (g % 166)")
	exec(t, db.Pool, "VACUUM ANALYZE public.poisoned_hot")
	got := measureClaim(t, db.Pool, q, claimBatchSize)
	require.EqualValues(t, claimBatchSize, got.Rows)
	requireFlat(t, "20,000 poisoned ahead of live rows in 10 keys + 1,000 ready", got, base)
	requireSeedClaimCollapses(t, db.Pool, "poisoned ahead of live rows", q, base)
}

// Test_ClaimPlan_ConsecutiveKeys_DoNotCost: a bulk load of each key's history in key order
// (200 keys × 1,000 rows). In id order the first 32 heads are 32,000 rows apart; measured on the
// raw predicate one claim grew from 0.9 ms at 5k rows to 26 ms at 200k.
func Test_ClaimPlan_ConsecutiveKeys_DoNotCost(t *testing.T) {
	t.Parallel()
	db := newPlanDB(t)
	base := healthyBaseline(t, db.Pool, true)
	q := newQueue(t, db.Pool, "public.consecutive", true)
	fillConsecutive(t, db.Pool, q, 200, 1_000)
	analyze(t, db.Pool, q)
	got := measureClaim(t, db.Pool, q, claimBatchSize)
	require.EqualValues(t, claimBatchSize, got.Rows)
	requireFlat(t, "consecutive keys 200 x 1,000", got, base)
	requireSeedClaimCollapses(t, db.Pool, "consecutive keys", q, base)
}

// Test_ClaimPlan_StaleHeadStatistics_DoesNotCollapse: the statistics that go stale are not only
// the queue table's. outbox.partition_heads was analyzed while it held a handful of heads (and
// autovacuum has not come round yet), then a burst of 320,000 rows over 53,333 keys creates that
// many heads. The queue table itself is freshly analyzed, so only the heads' statistics lie.
func Test_ClaimPlan_StaleHeadStatistics_DoesNotCollapse(t *testing.T) {
	t.Parallel()
	db := newPlanDB(t)
	base := healthyBaseline(t, db.Pool, true)
	exec(t, db.Pool, "ALTER TABLE outbox.partition_heads SET (autovacuum_enabled = false)")
	q := newQueue(t, db.Pool, "public.burst_heads", true)
	fillInterleaved(t, db.Pool, q, 320_000, 320_000/rowsPerKey)
	exec(t, db.Pool, "ANALYZE public.burst_heads")
	got := measureClaim(t, db.Pool, q, claimBatchSize)
	require.EqualValues(t, claimBatchSize, got.Rows)
	requireFlat(t, "stale partition_heads stats, burst 320,000 rows / 53,333 keys", got, base)
}
