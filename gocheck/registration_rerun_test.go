package gocheck

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pgdrain/pgdrain/internal/testdb"
)

// create_queue run again on a registered queue with the same settings (deploy scripts and
// migrations do) takes no lock on the queue table: its columns, checks and triggers are in place,
// so it alters nothing. It used to drop and make its triggers again and run ALTER TABLE ... ADD
// COLUMN IF NOT EXISTS, each an ACCESS EXCLUSIVE lock, which waited for an open lock-mode batch
// while every producer and claim of the queue waited behind it. A trigger that is not in place
// (disabled here) is still made again.
func TestRegistration_CreateQueueAgainWaitsForNothing(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testdb.New(t)
	_, err := db.Pool.Exec(ctx, `
		SELECT outbox.create_queue('public.events', 'resource_id');
		SELECT outbox.create_queue('public.plain');
		SELECT outbox.enqueue('public.events', 'created', '{}', 'k' || g) FROM generate_series(1, 4) g;
		SELECT outbox.enqueue('public.plain', 'created', '{}') FROM generate_series(1, 4);`)
	require.NoError(t, err)

	batch, err := db.Pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = batch.Rollback(ctx) }()
	_, err = batch.Exec(ctx, `SELECT outbox.settle_locked('public.events',
		(SELECT array_agg(id) FROM outbox.claim_locked('public.events', 1)), '{sent}')`)
	require.NoError(t, err)
	_, err = batch.Exec(ctx, `SELECT outbox.settle_locked('public.plain',
		(SELECT array_agg(id) FROM outbox.claim_locked('public.plain', 1)), '{sent}')`)
	require.NoError(t, err)

	deploy, err := db.Pool.Acquire(ctx)
	require.NoError(t, err)
	defer deploy.Release()
	_, err = deploy.Exec(ctx, `SET lock_timeout = '1s'`)
	require.NoError(t, err)
	for _, call := range []string{
		`SELECT outbox.create_queue('public.events', 'resource_id')`,
		`SELECT outbox.create_queue('public.plain')`,
	} {
		_, err = deploy.Exec(ctx, call)
		require.NoError(t, err, "%s beside an open lock-mode batch", call)
	}
	_, err = deploy.Exec(ctx, `BEGIN;
		SELECT outbox.create_queue('public.events', 'resource_id');
		SELECT outbox.create_queue('public.plain');`)
	require.NoError(t, err)
	var locks int
	require.NoError(t, deploy.QueryRow(ctx, `SELECT count(*) FROM pg_locks
		WHERE pid = pg_backend_pid() AND locktype = 'relation'
		  AND relation IN ('public.events'::regclass, 'public.plain'::regclass)`).Scan(&locks))
	require.Zero(t, locks, "create_queue again locks neither queue table")
	_, err = deploy.Exec(ctx, `COMMIT`)
	require.NoError(t, err)
	require.NoError(t, batch.Commit(ctx))

	// The triggers work as before: a new row of each queue is claimed.
	_, err = db.Pool.Exec(ctx, `
		INSERT INTO public.events (event_type, payload, resource_id) VALUES ('later', '{}', 'new-key');
		INSERT INTO public.plain (event_type, payload) VALUES ('later', '{}');`)
	require.NoError(t, err)
	var types []string
	rows, err := db.Pool.Query(ctx, `SELECT event_type FROM outbox.claim_batch('public.events', 10)
		UNION ALL SELECT event_type FROM outbox.claim_batch('public.plain', 10)`)
	require.NoError(t, err)
	for rows.Next() {
		var s string
		require.NoError(t, rows.Scan(&s))
		types = append(types, s)
	}
	require.NoError(t, rows.Err())
	require.Len(t, types, 8, "3 + 1 events of each queue")
	require.Contains(t, types, "later")

	// A trigger disabled by hand is made again by create_queue.
	_, err = db.Pool.Exec(ctx, `ALTER TABLE public.events DISABLE TRIGGER pgdrain_heads;
		ALTER TABLE public.plain DISABLE TRIGGER pgdrain_truncate;
		SELECT outbox.create_queue('public.events', 'resource_id');
		SELECT outbox.create_queue('public.plain');`)
	require.NoError(t, err)
	var disabled int
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT count(*) FROM pg_trigger
		WHERE tgrelid IN ('public.events'::regclass, 'public.plain'::regclass) AND tgname LIKE 'pgdrain%' AND tgenabled <> 'O'`).Scan(&disabled))
	require.Zero(t, disabled)
}
