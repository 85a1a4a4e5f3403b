package gocheck

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
)

// The claim-plan checks pin invariant 6 (claim cost does not grow with the backlog) with shared
// buffer counts, never wall time. EXPLAIN (ANALYZE, BUFFERS) of `SELECT * FROM claim_batch(...)`
// reports on its Function Scan node every buffer the backend touched while the function ran,
// including the statements inside it (buffer usage is counted per backend), so one number covers
// the whole claim. Each measurement runs in a transaction that is rolled back: the claim leaves
// the queue exactly as it found it.

// claimBatchSize is the batch the drainer claims by default (seed 001's BatchSize).
const claimBatchSize = 32

// hostileFactor is how many times the buffers of the healthy 1,000-row queue a claim may touch
// in a hostile state (issue 5's target).
const hostileFactor = 3

// claimCost is what one claim_batch touched.
type claimCost struct {
	Buffers int64 // shared hit + shared read blocks
	Rows    int64 // rows the claim returned
}

func (c claimCost) String() string { return fmt.Sprintf("%d buffers, %d rows", c.Buffers, c.Rows) }

// explainFunctionScan runs EXPLAIN (ANALYZE, BUFFERS) of sql (a SELECT over one function) on conn
// inside a transaction it rolls back, and returns the top node's shared buffers and rows.
func explainFunctionScan(ctx context.Context, conn *pgx.Conn, sql string) (claimCost, error) {
	tx, err := conn.Begin(ctx)
	if err != nil {
		return claimCost{}, err
	}
	defer tx.Rollback(ctx)
	var raw []byte
	if err := tx.QueryRow(ctx, "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) "+sql).Scan(&raw); err != nil {
		return claimCost{}, fmt.Errorf("explaining %s: %w", sql, err)
	}
	var out []struct {
		Plan struct {
			SharedHit  int64 `json:"Shared Hit Blocks"`
			SharedRead int64 `json:"Shared Read Blocks"`
			Rows       int64 `json:"Actual Rows"`
		} `json:"Plan"`
	}
	if err := json.Unmarshal(raw, &out); err != nil || len(out) != 1 {
		return claimCost{}, fmt.Errorf("reading EXPLAIN output %s: %v", raw, err)
	}
	return claimCost{Buffers: out[0].Plan.SharedHit + out[0].Plan.SharedRead, Rows: out[0].Plan.Rows}, nil
}

// literal quotes s as an SQL string literal (EXPLAIN takes no bind parameters).
func literal(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }

// measureClaim returns the median cost of three claim_batch(queue, batch) calls, each rolled back,
// on one connection after a warm-up call (the first call of a session also loads catalog caches).
func measureClaim(t *testing.T, pool *pgxpool.Pool, queue string, batch int) claimCost {
	t.Helper()
	ctx := context.Background()
	conn, err := pool.Acquire(ctx)
	require.NoError(t, err)
	defer conn.Release()
	sql := fmt.Sprintf("SELECT * FROM outbox.claim_batch(%s, %d)", literal(queue), batch)
	_, err = explainFunctionScan(ctx, conn.Conn(), sql)
	require.NoError(t, err)
	return medianClaim(t, conn.Conn(), sql)
}

// medianClaim is the median cost of three claims on conn, each rolled back. One claim per second
// per queue searches the ready heads from the front (a session's cursor lasts a second), so one
// of the three may, and with the xmin held that one walks every dead entry the drain left in front
// of the live heads by design; the other two start where it stopped. A single sample is that
// front search as often as a second holds one claim: on a loaded machine (the test suite in
// parallel) often enough to fail, so the median. The drainer's claims are measured the same way
// on a session that keeps no cursor (a monitoring query, a script, a replica's first claim).
func medianClaim(t *testing.T, conn *pgx.Conn, claimSQL string) claimCost {
	t.Helper()
	costs := make([]claimCost, 3)
	for i := range costs {
		var err error
		costs[i], err = explainFunctionScan(context.Background(), conn, claimSQL)
		require.NoError(t, err)
	}
	slices.SortFunc(costs, func(a, b claimCost) int { return int(a.Buffers - b.Buffers) })
	return costs[1]
}

// Test_ClaimPlan_MeterCountsBuffersInsideFunctions proves the meter the other claim-plan checks
// rely on: a function that reads a whole table through dynamic SQL is charged at least the table's
// pages, and a claim is charged for its work. A meter that always said 0 would pass everything.
func Test_ClaimPlan_MeterCountsBuffersInsideFunctions(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := newPlanDB(t)
	q := newQueue(t, db.Pool, "public.meter", true)
	fillInterleaved(t, db.Pool, q, 50_000, 8_000)
	_, err := db.Pool.Exec(ctx, `
		CREATE FUNCTION public.read_everything(t regclass) RETURNS bigint LANGUAGE plpgsql AS $$
		DECLARE n bigint;
		BEGIN
		  EXECUTE pg_catalog.format('SELECT count(*) FROM %s', t) INTO n;
		  RETURN n;
		END $$`)
	require.NoError(t, err)
	var pages int64
	require.NoError(t, db.Pool.QueryRow(ctx, "SELECT pg_relation_size($1::regclass) / current_setting('block_size')::int", q).Scan(&pages))

	conn, err := db.Pool.Acquire(ctx)
	require.NoError(t, err)
	defer conn.Release()
	scan, err := explainFunctionScan(ctx, conn.Conn(), fmt.Sprintf("SELECT * FROM public.read_everything(%s)", literal(q)))
	require.NoError(t, err)
	claim := measureClaim(t, db.Pool, q, claimBatchSize)
	t.Logf("table pages %d; full read inside a function: %s; claim_batch(32): %s", pages, scan, claim)
	require.GreaterOrEqual(t, scan.Buffers, pages, "a function that reads every page must be charged for every page")
	require.EqualValues(t, claimBatchSize, claim.Rows)
	require.Greater(t, claim.Buffers, int64(claimBatchSize), "a claim reads at least one page per claimed row")
}
