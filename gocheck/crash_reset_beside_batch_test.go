package gocheck

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pgdrain/pgdrain/internal/testdb"
)

// After a crash reset of the unlogged derived state (heads, built marks, clocks, wake notes, commit
// hooks and notes: every UNLOGGED table of schema outbox emptied, as crash recovery leaves them), the
// first claim rebuilds the heads. When that claim is a lock-mode batch that stays open (it delivers
// its rows, then commits), nobody else waits for it: producers of its key and of other keys (as
// pgdrain_producer, lock_timeout 1 s), and a second worker's claims in both modes (as pgdrain_worker,
// lock_timeout 1 s: a claim that waits for the batch fails with 55P03). Afterwards every row is
// delivered once, per key in commit order, and outbox.repair(queue, true) finds nothing.
func TestCrashReset_FirstLockModeBatchHoldsUpNobody(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := orderQueue(t)

	// committed[key]: the key's rows in commit order.
	committed := map[string][]int64{}
	owner := loginAs(t, db, "pgdrain_producer")
	for _, k := range []string{"rk", "rk", "o1", "o2", "o2", "o3"} {
		committed[k] = append(committed[k], insertEvent(t, owner, k))
	}

	crashResetAll(t, db)

	// The first claim after the reset: a lock-mode batch, open for the rest of the check.
	worker := lockTimeout1s(t, loginAs(t, db, "pgdrain_worker"))
	batch, err := worker.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = batch.Rollback(ctx) }()
	held := idsOf(t, batch, `SELECT id FROM outbox.claim_locked('public.events', 1)`)
	var batchPID int
	require.NoError(t, batch.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&batchPID))
	batchLocks := func() string { return advisoryLocksOf(t, db, batchPID) }
	require.Equal(t, []int64{committed["rk"][0]}, held, "the batch claims rk's first row (the smallest id)")

	// Producers beside the open batch, of its key and of others, never wait.
	producer := lockTimeout1s(t, loginAs(t, db, "pgdrain_producer"))
	commit := func(what string, keys ...string) {
		t.Helper()
		tx, err := producer.Begin(ctx)
		require.NoError(t, err)
		ids := make([]int64, len(keys))
		for i, k := range keys {
			ids[i] = insertEvent(t, tx, k)
		}
		err = tx.Commit(ctx)
		require.NoError(t, err, "%s committed without waiting for the batch: %s", what, waitDetail(err))
		for i, k := range keys {
			committed[k] = append(committed[k], ids[i])
		}
	}
	commit("a producer of the batch's key", "rk")
	commit("a producer of another key", "o1")
	commit("a producer of the batch's key and others", "rk", "o2", "o3")
	commit("a producer of a new key", "fresh")

	// A second worker beside the open batch: its claims do not wait for the batch.
	second := lockTimeout1s(t, loginAs(t, db, "pgdrain_worker"))
	var delivered = map[string][]int64{}
	secondBatch, err := second.Begin(ctx)
	require.NoError(t, err)
	rows, err := secondBatch.Query(ctx, `SELECT id, partition_key FROM outbox.claim_locked('public.events', 10)`)
	var got []struct {
		id  int64
		key string
	}
	if err == nil {
		got, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (struct {
			id  int64
			key string
		}, error) {
			var c struct {
				id  int64
				key string
			}
			return c, r.Scan(&c.id, &c.key)
		})
	}
	if assert.NoError(t, err, "a second worker's claim_locked waited for the open batch: %s; the batch holds %s", waitDetail(err), batchLocks()) {
		assert.NotEmpty(t, got, "the second batch claims the other keys' heads")
		var ids []int64
		for _, c := range got {
			assert.NotEqual(t, "rk", c.key, "rk's head is the first batch's")
			ids = append(ids, c.id)
			delivered[c.key] = append(delivered[c.key], c.id)
		}
		if len(ids) > 0 {
			settleClaimed(t, secondBatch, ids, "sent")
		}
		require.NoError(t, secondBatch.Commit(ctx))
	} else {
		_ = secondBatch.Rollback(ctx)
	}
	type lease struct {
		id    int64
		token string
	}
	var leased []lease
	rows, err = second.Query(ctx, `SELECT id, lease_token::text FROM outbox.claim_batch('public.events', 10)`)
	if err == nil {
		leased, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (lease, error) {
			var l lease
			return l, r.Scan(&l.id, &l.token)
		})
	}
	if assert.NoError(t, err, "a second worker's claim_batch waited for the open batch: %s; the batch holds %s", waitDetail(err), batchLocks()) {
		// Give the leases back untouched: the drain below delivers them.
		for _, l := range leased {
			var ok bool
			require.NoError(t, second.QueryRow(ctx, `SELECT outbox.release('public.events', $1, $2::uuid)`, l.id, l.token).Scan(&ok))
			require.True(t, ok)
		}
	}

	// The batch delivers what it holds and commits.
	settleClaimed(t, batch, held, "sent")
	require.NoError(t, batch.Commit(ctx))
	delivered["rk"] = append([]int64{held[0]}, delivered["rk"]...)

	for k, ids := range drainInOrder(t, db) {
		delivered[k] = append(delivered[k], ids...)
	}
	require.Equal(t, committed, delivered, "every row delivered once, per key in commit order")
	requireRepairFindsNothing(t, db)
}

// crashResetAll empties what crash recovery empties: every UNLOGGED table of schema outbox (heads,
// built marks, clocks, wake notes, commit hooks and notes), and ends the owner pool's sessions.
func crashResetAll(t *testing.T, db *testdb.DB) {
	t.Helper()
	var tables string
	require.NoError(t, db.Pool.QueryRow(context.Background(), `SELECT string_agg(c.oid::regclass::text, ', ' ORDER BY c.relname)
		FROM pg_class c WHERE c.relnamespace = 'outbox'::regnamespace AND c.relpersistence = 'u' AND c.relkind = 'r'`).Scan(&tables))
	require.Contains(t, tables, "outbox.partition_heads_built")
	exec(t, db.Pool, "TRUNCATE "+tables)
	db.Pool.Reset()
}

// advisoryLocksOf lists the advisory locks the backend pid holds, with the queue they are of.
func advisoryLocksOf(t *testing.T, db *testdb.DB, pid int) string {
	t.Helper()
	var locks string
	require.NoError(t, db.Pool.QueryRow(context.Background(), `
		SELECT coalesce(string_agg(format('advisory lock (%s, %s) %s%s', l.classid, (l.objid::bigint - CASE WHEN l.objid::bigint > 2147483647 THEN 4294967296 ELSE 0 END),
		         l.mode, coalesce(' (= (1885823232 + queue_id ' || q.queue_id || ' of ' || q.queue || ', ' || (l.objid::bigint - CASE WHEN l.objid::bigint > 2147483647 THEN 4294967296 ELSE 0 END) || '))', '')), '; '), 'no advisory lock')
		FROM pg_locks l LEFT JOIN outbox.queues q ON l.classid::bigint = 1885823232 + q.queue_id
		WHERE l.pid = $1 AND l.locktype = 'advisory' AND l.granted`, pid).Scan(&locks))
	return locks
}

// lockTimeout1s sets a 1 s lock_timeout on conn.
func lockTimeout1s(t *testing.T, conn *pgx.Conn) *pgx.Conn {
	t.Helper()
	_, err := conn.Exec(context.Background(), `SET lock_timeout = '1s'`)
	require.NoError(t, err)
	return conn
}

// waitDetail names what a failed statement was doing: SQLSTATE, message and the PL/pgSQL context
// (which function and statement waited).
func waitDetail(err error) string {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return fmt.Sprintf("%s %s; context: %s", pgErr.Code, pgErr.Message, pgErr.Where)
	}
	if err != nil {
		return err.Error()
	}
	return ""
}

// requireRepairFindsNothing runs outbox.repair('public.events', true) (a dry run) and requires it to
// report nothing.
func requireRepairFindsNothing(t *testing.T, db *testdb.DB) {
	t.Helper()
	rows, err := db.Pool.Query(context.Background(),
		`SELECT coalesce(partition_key, '') || ': ' || cause || ': ' || coalesce(detail, '') FROM outbox.repair('public.events', true)`)
	require.NoError(t, err)
	found, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	require.Empty(t, found, "outbox.repair(dry_run) reports nothing")
}
