package gocheck

import (
	"context"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
)

// Claims in motion (issue 12): a claim's cost must not grow with the work done since the last
// vacuum, also while another session holds the xmin horizon (then vacuum can remove nothing, and
// every head a claim or result moved on leaves a dead index entry in front of the live ones).
// The drain runs on one connection, as a drainer's claims do, and the claims are measured on that
// same connection during the drain (each measured claim rolled back).

// drainAndMeasure drains events from queue q on one connection in claim_batch(32) + apply_results
// rounds and returns the buffers of a claim measured after every `every` events.
func drainAndMeasure(t *testing.T, pool *pgxpool.Pool, q string, events, every int) []claimCost {
	t.Helper()
	ctx := context.Background()
	conn, err := pool.Acquire(ctx)
	require.NoError(t, err)
	defer conn.Release()
	claimSQL := fmt.Sprintf("SELECT * FROM outbox.claim_batch(%s, %d)", literal(q), claimBatchSize)
	var samples []claimCost
	for done, next := 0, every; done < events; {
		var got int
		require.NoError(t, conn.QueryRow(ctx, fmt.Sprintf(`
			WITH c AS MATERIALIZED (SELECT array_agg(id) ids, array_agg(lease_token) toks FROM outbox.claim_batch(%[1]s, 32))
			SELECT coalesce(cardinality(ids), 0) FROM c, LATERAL (
			  SELECT count(*) FROM outbox.apply_results(%[1]s, coalesce(ids, '{}'), coalesce(toks, '{}'),
			                                            array_fill('sent'::text, ARRAY[coalesce(cardinality(ids), 0)]))) r`,
			literal(q))).Scan(&got))
		require.Positive(t, got, "the queue ran dry after %d events", done)
		done += got
		if done >= next {
			cost, err := explainFunctionScan(ctx, conn.Conn(), claimSQL)
			require.NoError(t, err)
			samples = append(samples, cost)
			next += every
		}
	}
	return samples
}

func Test_ClaimPlan_InMotion_WithHeldXmin_StaysFlat(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := newPlanDB(t)
	base := healthyBaseline(t, db.Pool, true)
	q := newQueue(t, db.Pool, "public.in_motion", true)
	fillInterleaved(t, db.Pool, q, 60_000, 10_000)
	analyze(t, db.Pool, q)

	holder, err := db.Pool.Acquire(ctx)
	require.NoError(t, err)
	defer holder.Release()
	tx, err := holder.Begin(ctx)
	require.NoError(t, err)
	defer tx.Rollback(ctx)
	_, err = tx.Exec(ctx, "SELECT txid_current()") // an idle session holding an xid: nothing can be vacuumed
	require.NoError(t, err)

	samples := drainAndMeasure(t, db.Pool, q, 40_000, 10_000)
	for i, got := range samples {
		require.EqualValues(t, claimBatchSize, got.Rows)
		requireFlat(t, fmt.Sprintf("claim after %d events drained, xmin held", (i+1)*10_000), got, base)
	}
}
