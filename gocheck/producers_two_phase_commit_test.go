package gocheck

import (
	"context"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/pgdrain/pgdrain/internal/testdb"
)

// A transaction that executed NOTIFY can not be prepared, and a producer's commit step notifies
// whenever its queue says so ('always', or 'when_waiting' while a drainer waits): a producer that
// commits in two phases (PREPARE TRANSACTION, XA) sets pgdrain.notify to 'off' in its transaction
// and never notifies. Its rows are delivered all the same. Run as pgdrain_producer, on a partitioned
// and an unpartitioned queue that notify 'always'.
func TestProducers_TwoPhaseCommitWithNotifyOff(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	ctx := context.Background()
	var prepared int
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT current_setting('max_prepared_transactions')::int`).Scan(&prepared))
	if prepared == 0 {
		t.Skip("the server has max_prepared_transactions = 0 (scripts/with-postgres.sh starts its clusters with 8)")
	}
	exec(t, db.Pool, `SELECT outbox.create_queue('public.parted', 'resource_id', channel => 'parted_wake');
		SELECT outbox.create_queue('public.flat', channel => 'flat_wake');
		SELECT outbox.set_notify('public.parted', 'always');
		SELECT outbox.set_notify('public.flat', 'always')`)
	producer := loginPool(t, db, "pgdrain_producer")
	listener, err := pgx.Connect(ctx, db.URL)
	require.NoError(t, err)
	defer listener.Close(ctx)
	_, err = listener.Exec(ctx, "LISTEN parted_wake; LISTEN flat_wake")
	require.NoError(t, err)

	for i, insert := range []string{
		`INSERT INTO public.parted (event_type, payload, resource_id) VALUES ('e', '{}', 'k')`,
		`INSERT INTO public.flat (event_type, payload) VALUES ('e', '{}')`,
	} {
		gid := fmt.Sprintf("pgdrain_two_phase_%s_%d", db.Name, i)
		conn, err := producer.Acquire(ctx)
		require.NoError(t, err)
		_, err = conn.Exec(ctx, "BEGIN; "+insert+"; PREPARE TRANSACTION '"+gid+"'")
		require.ErrorContains(t, err, "cannot PREPARE a transaction that has executed LISTEN, UNLISTEN, or NOTIFY",
			"without the setting the commit step notifies, and PREPARE refuses")
		_, err = conn.Exec(ctx, "ROLLBACK")
		require.NoError(t, err)

		_, err = conn.Exec(ctx, "BEGIN; SET LOCAL pgdrain.notify = off; "+insert+"; PREPARE TRANSACTION '"+gid+"'")
		require.NoError(t, err, "with pgdrain.notify off the transaction prepares")
		t.Cleanup(func() { _, _ = db.Pool.Exec(context.Background(), "ROLLBACK PREPARED '"+gid+"'") })
		_, err = conn.Exec(ctx, "COMMIT PREPARED '"+gid+"'")
		require.NoError(t, err)
		conn.Release()
	}
	require.Zero(t, heard(t, listener), "no NOTIFY from a transaction with pgdrain.notify off")

	// Delivered all the same; and without the setting the queues still notify.
	var claimed int
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM outbox.claim_batch('public.parted', 10))
		+ (SELECT count(*) FROM outbox.claim_batch('public.flat', 10))`).Scan(&claimed))
	require.Equal(t, 2, claimed, "both rows are claimed")
	_, err = producer.Exec(ctx, `INSERT INTO public.parted (event_type, payload, resource_id) VALUES ('e', '{}', 'other')`)
	require.NoError(t, err)
	_, err = producer.Exec(ctx, `INSERT INTO public.flat (event_type, payload) VALUES ('e', '{}')`)
	require.NoError(t, err)
	require.Equal(t, 2, heard(t, listener), "a transaction without the setting notifies as its queue says")
}
