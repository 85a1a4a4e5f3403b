package gocheck

import (
	"context"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
)

// Claims in motion (issue 12): a claim's cost must not grow with the work done since the last
// vacuum, also while another session holds the xmin horizon (then vacuum can remove nothing, and
// every head a claim or result moved on leaves a dead index entry in front of the live ones).
// The drain runs on one connection, as a drainer's claims do, and the claims are measured on that
// same connection during the drain (each measured claim rolled back).

// drainAndMeasure drains events from queue q on one connection in claim_batch(32) + apply_results
// rounds and returns the cost of a claim measured after every `every` events (on the draining
// connection, or with sampler set, on that session without a cursor), each the median of three
// (see medianClaim).
func drainAndMeasure(t *testing.T, pool *pgxpool.Pool, q string, events, every int, sampler *pgx.Conn) []claimCost {
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
			if sampler != nil {
				samples = append(samples, medianClaim(t, sampler, claimSQL))
			} else {
				samples = append(samples, medianClaim(t, conn.Conn(), claimSQL))
			}
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

	// Drained and measured as pgdrain_worker, the role drainers run as.
	samples := drainAndMeasure(t, loginPool(t, db, "pgdrain_worker"), q, 40_000, 10_000, nil)
	for i, got := range samples {
		require.EqualValues(t, claimBatchSize, got.Rows)
		requireFlat(t, fmt.Sprintf("claim after %d events drained, xmin held", (i+1)*10_000), got, base)
	}
}

// A claim on a session without a cursor during a drain with the xmin held starts where the queue's last search
// from the front stopped (outbox.claim_start_q<id>), not at the front, where every head the drain
// moved has left a dead entry that nothing can vacuum: before migration 00016 such claims cost 5-26x
// the static claim late in a drain, and with replicas in flight often returned nothing.
func Test_ClaimPlan_InMotion_ColdSessionWithHeldXmin_StaysFlat(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := newPlanDB(t)
	base := healthyBaseline(t, db.Pool, true)
	q := newQueue(t, db.Pool, "public.in_motion_cold", true)
	fillInterleaved(t, db.Pool, q, 60_000, 10_000)
	analyze(t, db.Pool, q)

	holder, err := db.Pool.Acquire(ctx)
	require.NoError(t, err)
	defer holder.Release()
	tx, err := holder.Begin(ctx)
	require.NoError(t, err)
	defer tx.Rollback(ctx)
	_, err = tx.Exec(ctx, "SELECT txid_current()")
	require.NoError(t, err)

	// Drained and sampled as pgdrain_worker, the role drainers run as.
	worker := loginPool(t, db, "pgdrain_worker")
	sampler, err := worker.Acquire(ctx)
	require.NoError(t, err)
	defer sampler.Release()
	_, err = explainFunctionScan(ctx, sampler.Conn(), fmt.Sprintf("SELECT * FROM outbox.claim_batch(%s, %d)", literal(q), claimBatchSize))
	require.NoError(t, err) // warms the session's caches up, as healthyBaseline's claims are
	samples := drainAndMeasure(t, worker, q, 40_000, 10_000, sampler.Conn())
	for i, got := range samples {
		require.EqualValues(t, claimBatchSize, got.Rows)
		requireFlat(t, fmt.Sprintf("claim without a cursor after %d events drained, xmin held", (i+1)*10_000), got, base)
	}
}
