package gocheck

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/pgdrain/pgdrain/internal/testdb"
)

// settleQueue makes an unpartitioned queue public.sv with n events and returns its queue_id.
func settleQueue(t *testing.T, db *testdb.DB, n int) int {
	t.Helper()
	ctx := context.Background()
	_, err := db.Pool.Exec(ctx, `SELECT outbox.create_queue('public.sv')`)
	require.NoError(t, err)
	_, err = db.Pool.Exec(ctx, `SELECT outbox.enqueue('public.sv', 'e', '{}') FROM generate_series(1, $1)`, n)
	require.NoError(t, err)
	var queueID int
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT queue_id FROM outbox.queues WHERE queue = 'public.sv'`).Scan(&queueID))
	return queueID
}

// svRow is the whole row of public.sv as JSON, for before/after comparisons.
func svRow(t *testing.T, db *testdb.DB, id int64) string {
	t.Helper()
	var s string
	require.NoError(t, db.Pool.QueryRow(context.Background(),
		`SELECT to_jsonb(e)::text FROM public.sv e WHERE id = $1`, id).Scan(&s))
	return s
}

// Lock mode through a driver's nested transactions (pgx: SAVEPOINT / RELEASE SAVEPOINT, as PgJDBC
// autosave and nested atomic blocks do): rows claimed in a nested transaction are settled in the
// enclosing one, and in a nested transaction of their own.
func TestSettleLocked_NestedTransactionsClaimAndSettle(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testdb.New(t)
	settleQueue(t, db, 3)

	tx, err := db.Pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()

	inner, err := tx.Begin(ctx) // SAVEPOINT
	require.NoError(t, err)
	rows, err := inner.Query(ctx, `SELECT id FROM outbox.claim_locked('public.sv', 2)`)
	require.NoError(t, err)
	ids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	require.NoError(t, err)
	require.Len(t, ids, 2)
	require.NoError(t, inner.Commit(ctx)) // RELEASE SAVEPOINT

	var n int64
	require.NoError(t, tx.QueryRow(ctx, `SELECT outbox.settle_locked('public.sv', $1, '{sent,transient}')`, ids).Scan(&n))
	require.EqualValues(t, 2, n, "rows claimed in a released savepoint are settled by the enclosing transaction")

	inner, err = tx.Begin(ctx)
	require.NoError(t, err)
	var third int64
	require.NoError(t, inner.QueryRow(ctx, `SELECT id FROM outbox.claim_locked('public.sv', 1)`).Scan(&third))
	require.NoError(t, inner.QueryRow(ctx, `SELECT outbox.settle_locked('public.sv', ARRAY[$1::bigint], '{sent}')`, third).Scan(&n))
	require.EqualValues(t, 1, n, "a row claimed and settled in one savepoint")
	require.NoError(t, inner.Commit(ctx))
	require.NoError(t, tx.Commit(ctx))

	var sent, retrying int64
	require.NoError(t, db.Pool.QueryRow(ctx, `
		SELECT count(*) FILTER (WHERE sent_at IS NOT NULL), count(*) FILTER (WHERE attempt_count = 1 AND next_attempt_at > now())
		FROM public.sv`).Scan(&sent, &retrying))
	require.EqualValues(t, 2, sent)
	require.EqualValues(t, 1, retrying)
}

// Ownership comes from the row lock: a transaction that writes the held list by hand can not settle
// rows another transaction holds (at its top level or in a savepoint), nor rows that transaction
// held and gave up (savepoint rolled back, or committed). Each such call fails at once with 55000
// (it never waits for the other transaction's lock), changes nothing and leaves no lock behind.
func TestSettleLocked_RowsHeldElsewhereAreRefused(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testdb.New(t)
	queueID := settleQueue(t, db, 3)

	other, err := db.Pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = other.Rollback(ctx) }()
	var top, sub, dropped int64
	require.NoError(t, other.QueryRow(ctx, `SELECT id FROM outbox.claim_locked('public.sv', 1)`).Scan(&top))
	sp, err := other.Begin(ctx)
	require.NoError(t, err)
	require.NoError(t, sp.QueryRow(ctx, `SELECT id FROM outbox.claim_locked('public.sv', 1)`).Scan(&sub))
	// sp stays open: the other transaction holds sub in a live savepoint.
	sp2, err := sp.Begin(ctx)
	require.NoError(t, err)
	require.NoError(t, sp2.QueryRow(ctx, `SELECT id FROM outbox.claim_locked('public.sv', 1)`).Scan(&dropped))
	require.NoError(t, sp2.Rollback(ctx)) // its lock on dropped is gone

	before := map[int64]string{top: svRow(t, db, top), sub: svRow(t, db, sub), dropped: svRow(t, db, dropped)}
	forged := func(id int64, why string) {
		t.Helper()
		tx, err := db.Pool.Begin(ctx)
		require.NoError(t, err)
		defer func() { _ = tx.Rollback(ctx) }()
		_, err = tx.Exec(ctx, `SELECT set_config('pgdrain.held_' || $1::int, $2::bigint::text, true)`, queueID, id)
		require.NoError(t, err)
		callCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		start := time.Now()
		_, err = tx.Exec(callCtx, `SELECT outbox.settle_locked('public.sv', ARRAY[$1::bigint], '{sent}')`, id)
		code, msg := sqlState(err)
		require.Equal(t, "55000", code, "%s: %v", why, err)
		require.Contains(t, msg, "is not held by this transaction", why)
		require.Less(t, time.Since(start), 2*time.Second, "%s: the refusal must not wait for the other transaction", why)
		require.NoError(t, tx.Rollback(ctx))
		require.Equal(t, before[id], svRow(t, db, id), "%s: the refused call changed the row", why)
	}
	forged(top, "a row another transaction holds at its top level")
	forged(sub, "a row another transaction holds in an open savepoint")

	// The row whose savepoint was rolled back is free: the refused calls above left no lock on it
	// either, so the other transaction claims it again and settles all three.
	forged(dropped, "a row nobody holds (the other transaction's savepoint was rolled back)")
	var again int64
	require.NoError(t, other.QueryRow(ctx, `SELECT id FROM outbox.claim_locked('public.sv', 3)`).Scan(&again))
	require.Equal(t, dropped, again)
	var n int64
	require.NoError(t, other.QueryRow(ctx,
		`SELECT outbox.settle_locked('public.sv', ARRAY[$1::bigint, $2, $3], '{sent,sent,sent}')`, top, sub, again).Scan(&n))
	require.EqualValues(t, 3, n)
	require.NoError(t, other.Commit(ctx))

	// Committed and unlocked: nobody holds the rows now, so a forged list settles nothing.
	for id := range before {
		before[id] = svRow(t, db, id)
	}
	var fresh int64
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT outbox.enqueue('public.sv', 'e', '{}')`).Scan(&fresh))
	before[fresh] = svRow(t, db, fresh)
	forged(fresh, "a row no transaction ever claimed")
}
