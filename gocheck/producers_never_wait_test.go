package gocheck

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"
	"golang.org/x/sync/errgroup"
)

// A producer never waits for a drainer: while a lock-mode batch holds one key's head (its row is
// being delivered) and has just emptied another key's head, a producer writes and commits both
// keys under lock_timeout = 1s (any lock wait fails it with 55P03). The row whose head the batch
// held is delivered by the next claim all the same (the producer left a wake note).
func TestProducers_NeverWaitForALockModeBatch(t *testing.T) {
	t.Parallel()
	db := orderQueue(t)
	ctx := context.Background()
	producer := loginAs(t, db, "pgdrain_producer")
	_, err := producer.Exec(ctx, `SET lock_timeout = '1s'`)
	require.NoError(t, err)
	insertEvent(t, producer, "a")
	insertEvent(t, producer, "b")

	worker := loginAs(t, db, "pgdrain_worker")
	batch, err := worker.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = batch.Rollback(ctx) }()
	var claimed int
	require.NoError(t, batch.QueryRow(ctx, `SELECT count(*) FROM outbox.claim_locked('public.events', 10)`).Scan(&claimed))
	require.Equal(t, 2, claimed)
	var bID int64
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT id FROM public.events WHERE resource_id = 'b'`).Scan(&bID))
	// b is delivered: its partition is now empty and the batch deletes its head (uncommitted).
	_, err = batch.Exec(ctx, `SELECT outbox.settle_locked('public.events', ARRAY[$1::bigint], '{sent}')`, bID)
	require.NoError(t, err)

	tx, err := producer.Begin(ctx)
	require.NoError(t, err)
	a2 := insertEvent(t, tx, "a")
	b2 := insertEvent(t, tx, "b")
	require.NoError(t, tx.Commit(ctx), "the producer committed without waiting for the batch")

	var aID int64
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT id FROM public.events WHERE resource_id = 'a' ORDER BY id LIMIT 1`).Scan(&aID))
	_, err = batch.Exec(ctx, `SELECT outbox.settle_locked('public.events', ARRAY[$1::bigint], '{sent}')`, aID)
	require.NoError(t, err)
	require.NoError(t, batch.Commit(ctx))

	rows, err := worker.Query(ctx, `SELECT id FROM outbox.claim_batch('public.events', 10) ORDER BY id`)
	require.NoError(t, err)
	var got []int64
	for rows.Next() {
		var id int64
		require.NoError(t, rows.Scan(&id))
		got = append(got, id)
	}
	require.NoError(t, rows.Err())
	require.Equal(t, []int64{a2, b2}, got, "one claim after the batch returns both new rows")
}

// A producer holds no lock per key: six sessions, each writing 10,000 keys into each of four
// partitioned queues in one transaction, commit side by side, and while its rows are uncommitted a
// producer holds no advisory lock at all; after its commit step it holds fewer locks than the
// default max_locks_per_transaction (the lock table can not overflow however many keys it writes).
func TestProducers_ManyKeysInManyQueuesTakeNoPerKeyLocks(t *testing.T) {
	t.Parallel()
	db := orderQueue(t)
	ctx := context.Background()
	queues := []string{"public.events", "public.events_b", "public.events_c", "public.events_d"}
	for _, q := range queues[1:] {
		_, err := db.Pool.Exec(ctx, `SELECT outbox.create_queue($1, 'resource_id')`, q)
		require.NoError(t, err)
	}
	const sessions, keys = 6, 10000
	var g errgroup.Group
	for s := range sessions {
		conn := loginAs(t, db, "pgdrain_producer")
		g.Go(func() error {
			tx, err := conn.Begin(ctx)
			if err != nil {
				return err
			}
			defer func() { _ = tx.Rollback(ctx) }()
			for _, q := range queues {
				if _, err := tx.Exec(ctx, fmt.Sprintf(`INSERT INTO %s (event_type, payload, resource_id)
					SELECT 'e', '{}', 'key-' || g FROM generate_series(1, %d) g`, q, keys)); err != nil {
					return fmt.Errorf("session %d, %s: %w", s, q, err)
				}
			}
			var advisory int
			if err := tx.QueryRow(ctx, `SELECT count(*) FROM pg_locks
				WHERE locktype = 'advisory' AND pid = pg_backend_pid()`).Scan(&advisory); err != nil {
				return err
			}
			if advisory != 0 {
				return fmt.Errorf("session %d holds %d advisory locks before COMMIT", s, advisory)
			}
			// The commit step run now (its locks are then held to the end): whatever it takes
			// for 40,000 keys fits in the default max_locks_per_transaction (64) of one session,
			// which the cluster here (128) would not show by failing. The lock table holds one
			// entry per object a transaction locks, whatever its modes (a table read and written
			// is one entry, two rows of pg_locks).
			if _, err := tx.Exec(ctx, `SET CONSTRAINTS outbox.pgdrain_commit IMMEDIATE`); err != nil {
				return err
			}
			var held int
			if err := tx.QueryRow(ctx, `SELECT count(DISTINCT (locktype, database, relation, page, tuple, classid, objid, objsubid))
				FROM pg_locks
				WHERE pid = pg_backend_pid() AND locktype NOT IN ('virtualxid', 'transactionid')`).Scan(&held); err != nil {
				return err
			}
			if held >= 64 {
				return fmt.Errorf("session %d holds %d locks after its commit step", s, held)
			}
			return tx.Commit(ctx)
		})
	}
	require.NoError(t, g.Wait())
	for _, q := range queues {
		var pending, heads int
		require.NoError(t, db.Pool.QueryRow(ctx, `SELECT (SELECT pending FROM outbox.stats($1)),
			(SELECT count(*) FROM outbox.partition_heads h JOIN outbox.queues x USING (queue_id) WHERE x.queue = $1)`, q).
			Scan(&pending, &heads))
		require.Equal(t, sessions*keys, pending, q)
		require.Equal(t, keys, heads, q)
	}
}
