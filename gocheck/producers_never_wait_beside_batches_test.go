package gocheck

import (
	"context"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/pgdrain/pgdrain/internal/testdb"
)

// An open lock-mode batch that has just deleted key rk's head (delivered its last row), parked it
// (a transient failure), made it (applying a SERIALIZABLE producer's wake note) or rebuilt it (the
// first claim after a crash reset of the unlogged state), or that holds a run of rk's rows
// (claim_locked_runs) it delivered or stopped at its first row, never makes a producer of rk wait:
// single-row, two-key and SERIALIZABLE producers, as pgdrain_producer with lock_timeout = 1s (any
// lock wait fails them with 55P03), commit while the batch is open. Afterwards every row is
// delivered, rk's in commit order (issue 29, item 1: the commit step's head insert waited on the
// batch's uncommitted delete (until 00024) or on its uncommitted insert (until 00025)).
func TestProducers_NeverWaitBesideAnOpenLockModeBatch(t *testing.T) {
	t.Parallel()
	scenarios := []struct {
		name string
		// Before the batch: what is committed. In the batch: what it did to rk's head.
		before func(t *testing.T, db *testdb.DB)
		batch  func(t *testing.T, db *testdb.DB, batch pgx.Tx)
	}{
		{"deleted its head", commitRow, func(t *testing.T, db *testdb.DB, batch pgx.Tx) {
			settleClaimed(t, batch, claimLocked(t, batch, 1), "sent")
		}},
		{"parked its head", commitRow, func(t *testing.T, db *testdb.DB, batch pgx.Tx) {
			settleClaimed(t, batch, claimLocked(t, batch, 1), "transient")
		}},
		{"made its head from a wake note", commitSerializableRow, func(t *testing.T, db *testdb.DB, batch pgx.Tx) {
			require.NotEmpty(t, claimLocked(t, batch, 1))
		}},
		{"rebuilt the heads after a crash reset", crashReset, func(t *testing.T, db *testdb.DB, batch pgx.Tx) {
			require.NotEmpty(t, claimLocked(t, batch, 1))
		}},
		// Runs (claim_locked_runs, issue 28): the batch holds rk's next rows too.
		{"delivered a run and deleted its head", commitRows(3), func(t *testing.T, db *testdb.DB, batch pgx.Tx) {
			ids := claimLockedRuns(t, batch)
			require.Len(t, ids, 3, "the run takes rk's three rows")
			settleClaimed(t, batch, ids, "sent")
		}},
		{"parked a run at its first row", commitRows(3), func(t *testing.T, db *testdb.DB, batch pgx.Tx) {
			ids := claimLockedRuns(t, batch)
			require.Len(t, ids, 3, "the run takes rk's three rows")
			settleClaimed(t, batch, ids[:1], "transient")
		}},
	}
	for _, sc := range scenarios {
		t.Run(sc.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			db := orderQueue(t)
			sc.before(t, db)

			worker := loginAs(t, db, "pgdrain_worker")
			batch, err := worker.Begin(ctx)
			require.NoError(t, err)
			defer func() { _ = batch.Rollback(ctx) }()
			sc.batch(t, db, batch)

			producer := loginAs(t, db, "pgdrain_producer")
			_, err = producer.Exec(ctx, `SET lock_timeout = '1s'`)
			require.NoError(t, err)
			var committed []int64
			commit := func(what string, iso pgx.TxIsoLevel, keys ...string) {
				tx, err := producer.BeginTx(ctx, pgx.TxOptions{IsoLevel: iso})
				require.NoError(t, err)
				var ids []int64
				for _, k := range keys {
					ids = append(ids, insertEvent(t, tx, k))
				}
				require.NoError(t, tx.Commit(ctx), "%s committed without waiting for the batch", what)
				if keys[0] == "rk" {
					committed = append(committed, ids[0])
				}
			}
			commit("a single-row producer", pgx.ReadCommitted, "rk")
			commit("a two-key producer", pgx.ReadCommitted, "rk", "other")
			commit("a SERIALIZABLE producer", pgx.Serializable, "rk")
			commit("a single-row producer of a new key", pgx.ReadCommitted, "fresh")
			require.NoError(t, batch.Commit(ctx))

			delivered := drainInOrder(t, db)
			require.Equal(t, committed, delivered["rk"][len(delivered["rk"])-len(committed):],
				"rk's rows are delivered in commit order, after what was there before")
			var pending int
			require.NoError(t, db.Pool.QueryRow(ctx, `SELECT pending FROM outbox.stats('public.events')`).Scan(&pending))
			require.Zero(t, pending, "every row was delivered")
		})
	}
}

func commitRow(t *testing.T, db *testdb.DB) {
	t.Helper()
	insertEvent(t, db.Pool, "rk")
}

// commitSerializableRow commits a row of a new key rk in a SERIALIZABLE transaction, whose commit
// step leaves a wake note instead of making the head: the next claim makes it.
func commitSerializableRow(t *testing.T, db *testdb.DB) {
	t.Helper()
	ctx := context.Background()
	tx, err := db.Pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.Serializable})
	require.NoError(t, err)
	insertEvent(t, tx, "rk")
	require.NoError(t, tx.Commit(ctx))
	var heads int
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT count(*) FROM outbox.partition_heads`).Scan(&heads))
	require.Zero(t, heads, "the claim makes rk's head")
}

// crashReset commits a row of rk, then empties what crash recovery empties (the UNLOGGED state):
// the next claim rebuilds every head.
func crashReset(t *testing.T, db *testdb.DB) {
	t.Helper()
	commitRow(t, db)
	exec(t, db.Pool, `TRUNCATE outbox.partition_heads, outbox.partition_heads_built, outbox.partition_clocks, outbox.partition_wakes`)
}

// commitRows commits n rows of rk, one transaction each.
func commitRows(n int) func(t *testing.T, db *testdb.DB) {
	return func(t *testing.T, db *testdb.DB) {
		t.Helper()
		for range n {
			commitRow(t, db)
		}
	}
}

// claimLockedRuns locks runs of up to 8 rows per partition (outbox.claim_locked_runs) in batch.
func claimLockedRuns(t *testing.T, batch pgx.Tx) []int64 {
	t.Helper()
	return claimedIDs(t, batch, `SELECT id FROM outbox.claim_locked_runs('public.events', 8, 8)`)
}

func claimLocked(t *testing.T, batch pgx.Tx, n int) []int64 {
	t.Helper()
	return claimedIDs(t, batch, `SELECT id FROM outbox.claim_locked('public.events', $1)`, n)
}

// claimedIDs runs a claim in batch and returns the ids it locked.
func claimedIDs(t *testing.T, batch pgx.Tx, sql string, args ...any) []int64 {
	t.Helper()
	rows, err := batch.Query(context.Background(), sql, args...)
	require.NoError(t, err)
	ids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	require.NoError(t, err)
	return ids
}

func settleClaimed(t *testing.T, batch pgx.Tx, ids []int64, outcome string) {
	t.Helper()
	require.NotEmpty(t, ids)
	outcomes := make([]string, len(ids))
	for i := range outcomes {
		outcomes[i] = outcome
	}
	_, err := batch.Exec(context.Background(), `SELECT outbox.settle_locked('public.events', $1, $2)`, ids, outcomes)
	require.NoError(t, err)
}

// drainInOrder claims and records every row of public.events as sent, one claim at a time (backoffs
// ended as they come), and returns the ids delivered per key, in delivery order.
func drainInOrder(t *testing.T, db *testdb.DB) map[string][]int64 {
	t.Helper()
	ctx := context.Background()
	delivered := map[string][]int64{}
	for round := 0; round < 100; round++ {
		exec(t, db.Pool, `UPDATE public.events SET next_attempt_at = NULL WHERE sent_at IS NULL`)
		exec(t, db.Pool, `UPDATE outbox.partition_heads SET parked_until = NULL`)
		rows, err := db.Pool.Query(ctx, `SELECT id, partition_key, lease_token FROM outbox.claim_batch('public.events', 100)`)
		require.NoError(t, err)
		type claimed struct {
			id    int64
			key   string
			token string
		}
		got, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (claimed, error) {
			var c claimed
			return c, r.Scan(&c.id, &c.key, &c.token)
		})
		require.NoError(t, err)
		if len(got) == 0 {
			var pending int
			require.NoError(t, db.Pool.QueryRow(ctx, `SELECT pending FROM outbox.stats('public.events')`).Scan(&pending))
			if pending == 0 {
				return delivered
			}
			continue
		}
		for _, c := range got {
			delivered[c.key] = append(delivered[c.key], c.id)
			var ok bool
			require.NoError(t, db.Pool.QueryRow(ctx, `SELECT outbox.apply_result('public.events', $1, $2::uuid, 'sent')`,
				c.id, c.token).Scan(&ok))
			require.True(t, ok, fmt.Sprintf("result of %d recorded", c.id))
		}
	}
	t.Fatalf("public.events did not drain: %v delivered", delivered)
	return nil
}
