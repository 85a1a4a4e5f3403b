package gocheck

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

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

// holdXid keeps a transaction with an xid open on its own connection until the test ends (after
// its defers): an idle session holding the xmin horizon, so nothing can be vacuumed.
func holdXid(t *testing.T, pool *pgxpool.Pool) {
	t.Helper()
	ctx := context.Background()
	holder, err := pool.Acquire(ctx)
	require.NoError(t, err)
	tx, err := holder.Begin(ctx)
	require.NoError(t, err)
	t.Cleanup(func() {
		_ = tx.Rollback(ctx)
		holder.Release()
	})
	_, err = tx.Exec(ctx, "SELECT txid_current()")
	require.NoError(t, err)
}

func Test_ClaimPlan_InMotion_WithHeldXmin_StaysFlat(t *testing.T) {
	t.Parallel()
	db := newPlanDB(t)
	base := healthyBaseline(t, db.Pool, true)
	q := newQueue(t, db.Pool, "public.in_motion", true)
	fillInterleaved(t, db.Pool, q, 60_000, 10_000)
	analyze(t, db.Pool, q)

	holdXid(t, db.Pool)

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

	holdXid(t, db.Pool)

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

// Lock mode, the same: a claim_locked on a session without a cursor, during a lock-mode drain by
// four connections with the xmin held, starts where the queue's claims last stopped. Lock-mode
// claims did not move the queue's start on (only the once-a-second search from the front did), so
// such a claim walked every head the drain had moved in up to a second and the heads the other
// batches held: 3-6x the static claim in make bench's section 6d (4 replicas, 200,000 events,
// 2026-12-05), where lease mode stayed under 2x.
func Test_ClaimPlan_InMotion_LockModeColdSessionWithHeldXmin_StaysFlat(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := newPlanDB(t)
	worker := loginPool(t, db, "pgdrain_worker")
	healthy := newQueue(t, db.Pool, "public.healthy_locked", true)
	fillInterleaved(t, db.Pool, healthy, 1_000, 1_000/rowsPerKey)
	analyze(t, db.Pool, healthy)
	sampler, err := worker.Acquire(ctx)
	require.NoError(t, err)
	defer sampler.Release()
	claimSQL := func(q string) string {
		return fmt.Sprintf("SELECT * FROM outbox.claim_locked(%s, %d)", literal(q), claimBatchSize)
	}
	_, err = explainFunctionScan(ctx, sampler.Conn(), claimSQL(healthy))
	require.NoError(t, err) // warms the session's caches up
	base := medianClaim(t, sampler.Conn(), claimSQL(healthy))
	require.EqualValues(t, claimBatchSize, base.Rows)

	const events, every, drainers = 60_000, 12_000, 4
	q := newQueue(t, db.Pool, "public.in_motion_cold_locked", true)
	fillInterleaved(t, db.Pool, q, events+20_000, 10_000) // rows left for the last samples, drained meanwhile
	analyze(t, db.Pool, q)
	holdXid(t, db.Pool)

	// Four drainers, each a lock-mode batch per transaction: claim, hold the rows a moment (their
	// heads stay locked, as while a drainer applies them), settle.
	var drained atomic.Int64
	stop := make(chan struct{})
	errs := make(chan error, drainers)
	for range drainers {
		go func() {
			errs <- func() error {
				for {
					select {
					case <-stop:
						return nil
					default:
					}
					tx, err := worker.Begin(ctx)
					if err != nil {
						return err
					}
					var ids []int64
					if err := tx.QueryRow(ctx, fmt.Sprintf("SELECT coalesce(array_agg(id), '{}') FROM outbox.claim_locked(%s, 32)", literal(q))).Scan(&ids); err != nil {
						_ = tx.Rollback(ctx)
						return err
					}
					time.Sleep(time.Millisecond)
					if _, err := tx.Exec(ctx, fmt.Sprintf("SELECT outbox.settle_locked(%s, $1, array_fill('sent'::text, ARRAY[cardinality($1::bigint[])]))", literal(q)), ids); err != nil {
						_ = tx.Rollback(ctx)
						return err
					}
					if err := tx.Commit(ctx); err != nil {
						return err
					}
					drained.Add(int64(len(ids)))
				}
			}()
		}()
	}
	defer func() {
		close(stop)
		for range drainers {
			require.NoError(t, <-errs)
		}
	}()
	for next := int64(every); next <= events; next += every {
		for drained.Load() < next {
			time.Sleep(5 * time.Millisecond)
		}
		cost := medianClaim(t, sampler.Conn(), claimSQL(q))
		require.EqualValues(t, claimBatchSize, cost.Rows)
		requireFlat(t, fmt.Sprintf("claim_locked without a cursor after %d events drained, xmin held", next), cost, base)
	}
}
