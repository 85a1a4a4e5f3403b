package gocheck

import (
	"context"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
)

// seedClaimSQL is seed 001's straightforward claim, installed as a function so the same meter
// charges it: the deliverable rows in (attempt_count, id) order with a correlated NOT EXISTS for
// the partition's deliverable predecessor, over the two required indexes. It is the control of the
// hostile-state checks: in each state it must cost far more than the healthy baseline, which
// proves the state really is hostile (a check whose state a naive claim survives proves nothing).
const seedClaimSQL = `
CREATE OR REPLACE FUNCTION public.seed_claim(q regclass, n integer) RETURNS SETOF bigint
LANGUAGE plpgsql AS $f$
BEGIN
  RETURN QUERY EXECUTE pg_catalog.format(
    'SELECT t.id FROM %1$s t
     WHERE t.sent_at IS NULL AND t.attempt_count < 10
       AND (t.next_attempt_at IS NULL OR t.next_attempt_at <= now())
       AND (t.leased_until IS NULL OR t.leased_until <= now())
       AND NOT EXISTS (SELECT 1 FROM %1$s p WHERE p.resource_id = t.resource_id AND p.id < t.id
                                             AND p.sent_at IS NULL AND p.attempt_count < 10)
     ORDER BY t.attempt_count, t.id LIMIT $1 FOR UPDATE SKIP LOCKED', q) USING n;
END $f$`

// requireSeedClaimCollapses measures seed 001's claim on queue (max_attempts 10) once and
// requires it to cost more than hostileFactor times the baseline.
func requireSeedClaimCollapses(t *testing.T, pool *pgxpool.Pool, state, queue string, base claimCost) {
	t.Helper()
	got := logSeedClaim(t, pool, state, queue, base)
	require.Greaterf(t, got.Buffers, hostileFactor*base.Buffers,
		"control: seed 001's claim should collapse in state %q, or the state is not hostile", state)
}

// logSeedClaim measures seed 001's claim on queue and logs it beside the baseline.
func logSeedClaim(t *testing.T, pool *pgxpool.Pool, state, queue string, base claimCost) claimCost {
	t.Helper()
	ctx := context.Background()
	_, err := pool.Exec(ctx, seedClaimSQL)
	require.NoError(t, err)
	conn, err := pool.Acquire(ctx)
	require.NoError(t, err)
	defer conn.Release()
	got, err := explainFunctionScan(ctx, conn.Conn(),
		fmt.Sprintf("SELECT * FROM public.seed_claim(%s, %d)", literal(queue), claimBatchSize))
	require.NoError(t, err)
	t.Logf("%-60s %6d buffers (%.2fx baseline), %d rows", "control: seed 001's claim, "+state, got.Buffers,
		float64(got.Buffers)/float64(base.Buffers), got.Rows)
	return got
}
