package gocheck

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pgdrain/pgdrain/internal/testdb"
)

// A worker can not settle in lock mode a row it never claimed by writing the setting claim_locked
// keeps (SET LOCAL pgdrain.held_<queue_id>): settle_locked also requires the row lock to be the
// transaction's own. The forged call fails with 55000 and changes nothing; a real claim settles.
func TestSecurity_LockModeForgedHeldSettingIsRefused(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := securityFixture(t)
	worker := loginAs(t, db, "pgdrain_worker")

	var queueID int
	var victim int64
	require.NoError(t, db.Pool.QueryRow(ctx, `
		SELECT q.queue_id, (SELECT min(id) FROM public.events WHERE resource_id = 'r5')
		FROM outbox.queues q WHERE q.queue = 'public.events'`).Scan(&queueID, &victim))
	before := rowJSON(t, db, victim)

	tx, err := worker.Begin(ctx)
	require.NoError(t, err)
	_, err = tx.Exec(ctx, `SELECT set_config('pgdrain.held_' || $1::int, $2::bigint::text, true)`, queueID, victim)
	require.NoError(t, err)
	_, err = tx.Exec(ctx, `SELECT outbox.settle_locked('public.events', ARRAY[$1::bigint], ARRAY['sent'])`, victim)
	code, msg := sqlState(err)
	require.Equal(t, "55000", code, "%v", err)
	require.Contains(t, msg, "is not held by this transaction")
	require.NoError(t, tx.Rollback(ctx))
	require.Equal(t, before, rowJSON(t, db, victim), "the forged settle changed the row")

	tx, err = worker.Begin(ctx)
	require.NoError(t, err)
	var claimed int64
	require.NoError(t, tx.QueryRow(ctx, `SELECT id FROM outbox.claim_locked('public.events', 1)`).Scan(&claimed))
	var settled int64
	require.NoError(t, tx.QueryRow(ctx,
		`SELECT outbox.settle_locked('public.events', ARRAY[$1::bigint], ARRAY['sent'])`, claimed).Scan(&settled))
	require.EqualValues(t, 1, settled)
	require.NoError(t, tx.Commit(ctx))
}

// rowJSON is the whole queue row as JSON, for before/after comparisons.
func rowJSON(t *testing.T, db *testdb.DB, id int64) string {
	t.Helper()
	var s string
	require.NoError(t, db.Pool.QueryRow(context.Background(),
		`SELECT to_jsonb(e)::text FROM public.events e WHERE id = $1`, id).Scan(&s))
	return s
}
