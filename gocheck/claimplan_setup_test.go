package gocheck

import (
	"context"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/pgdrain/pgdrain/internal/testdb"
)

// Setup shared by the claim-plan checks: queues filled in bulk with INSERT ... SELECT
// generate_series (the heads trigger runs once per statement, as for any bulk producer).

// rowsPerKey is the seed's live shape: 8,643 pending rows over 1,439 keys, about 6 per key.
const rowsPerKey = 6

// newPlanDB is a fresh migrated database for one claim-plan check.
func newPlanDB(t *testing.T) *testdb.DB {
	t.Helper()
	return testdb.New(t)
}

// newQueue creates queue (partitioned by resource_id or not) with create_queue's defaults and
// returns its name.
func newQueue(t *testing.T, pool *pgxpool.Pool, queue string, partitioned bool) string {
	t.Helper()
	var col any
	if partitioned {
		col = "resource_id"
	}
	_, err := pool.Exec(context.Background(), "SELECT outbox.create_queue($1, $2)", queue, col)
	require.NoError(t, err)
	return queue
}

// insertRows adds n pending rows to queue; keyExpr renders row g's key (g = 1..n; ignored for an
// unpartitioned queue). The payload is about 100 bytes, like a small real event.
func insertRows(t *testing.T, pool *pgxpool.Pool, queue string, n int, keyExpr string) {
	t.Helper()
	ctx := context.Background()
	var partitioned bool
	require.NoError(t, pool.QueryRow(ctx,
		"SELECT partition_column IS NOT NULL FROM outbox.queues WHERE queue = $1", queue).Scan(&partitioned))
	cols, vals := "event_type, payload", "'evt', jsonb_build_object('n', g, 'pad', repeat('x', 80))"
	if partitioned {
		cols += ", resource_id"
		vals += ", " + keyExpr
	}
	_, err := pool.Exec(ctx, fmt.Sprintf(
		"INSERT INTO %s (%s) SELECT %s FROM generate_series(1, %d) g", queue, cols, vals, n))
	require.NoError(t, err)
}

// fillInterleaved adds n rows spread round-robin over keys keys (the usual arrival order).
func fillInterleaved(t *testing.T, pool *pgxpool.Pool, queue string, n, keys int) {
	t.Helper()
	insertRows(t, pool, queue, n, fmt.Sprintf("'key-' || (g %% %d)", keys))
}

// fillConsecutive adds keys × perKey rows, each key's rows one after another (a bulk load of
// each key's history, in key order).
func fillConsecutive(t *testing.T, pool *pgxpool.Pool, queue string, keys, perKey int) {
	t.Helper()
	insertRows(t, pool, queue, keys*perKey, fmt.Sprintf("'key-' || ((g - 1) / %d)", perKey))
}

// analyze refreshes the planner statistics of queue and of outbox.partition_heads.
func analyze(t *testing.T, pool *pgxpool.Pool, queue string) {
	t.Helper()
	_, err := pool.Exec(context.Background(), fmt.Sprintf("ANALYZE %s; ANALYZE outbox.partition_heads", queue))
	require.NoError(t, err)
}

// healthyBaseline is the reference every hostile state is held to: a 1,000-row queue of the same
// kind, about 6 rows per key, freshly analyzed, claimed 32 at a time.
func healthyBaseline(t *testing.T, pool *pgxpool.Pool, partitioned bool) claimCost {
	t.Helper()
	q := newQueue(t, pool, fmt.Sprintf("public.healthy_%t", partitioned), partitioned)
	fillInterleaved(t, pool, q, 1_000, 1_000/rowsPerKey)
	analyze(t, pool, q)
	base := measureClaim(t, pool, q, claimBatchSize)
	require.EqualValues(t, claimBatchSize, base.Rows, "the healthy queue must fill a whole batch")
	t.Logf("healthy 1,000-row baseline (partitioned=%t): %s", partitioned, base)
	return base
}

// requireFlat fails when a claim in state touched more than hostileFactor times the baseline's
// buffers, and logs both numbers either way.
func requireFlat(t *testing.T, state string, got, base claimCost) {
	t.Helper()
	t.Logf("%-60s %6d buffers (%.2fx baseline), %d rows", state, got.Buffers,
		float64(got.Buffers)/float64(base.Buffers), got.Rows)
	require.LessOrEqualf(t, got.Buffers, hostileFactor*base.Buffers,
		"%s: one claim touched %d buffers, more than %dx the healthy baseline (%d)",
		state, got.Buffers, hostileFactor, base.Buffers)
}
