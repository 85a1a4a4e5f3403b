package gocheck

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pgdrain/pgdrain/internal/testdb"
)

// A queue table whose id is GENERATED ALWAYS AS IDENTITY (the form many schemas use by default):
// such an id can only be written as DEFAULT, and renumbering a late transaction's rows at COMMIT
// wrote it with a value, so the producer's COMMIT failed with 428C9 ("column id can only be updated
// to DEFAULT"), and requeue_poisoned failed the same way for ever (a hostile DBA review). Now the
// identity draws the new ids, row after row: the late producer commits, per-key commit order holds,
// and poisoned rows are requeued to the tail of their key.
func TestQueues_AnIdGeneratedAlwaysIsRenumberedAndRequeued(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testdb.New(t)
	_, err := db.Pool.Exec(ctx, `
		CREATE TABLE public.events (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, event_type text NOT NULL,
		  payload jsonb NOT NULL, created_at timestamptz NOT NULL DEFAULT now(), resource_id text NOT NULL);
		SELECT outbox.create_queue('public.events', 'resource_id')`)
	require.NoError(t, err)
	producer := loginPool(t, db, "pgdrain_producer")

	early := beginTx(t, producer) // takes the smaller ids, commits last
	first := insertEvent(t, early, "k")
	second := insertEvent(t, early, "k")
	overtaking := insertEvent(t, producer, "k")
	require.Greater(t, overtaking, second)
	require.NoError(t, early.Commit(ctx), "the late producer commits: its rows take new ids from the identity")
	var ids []int64
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT array_agg(id ORDER BY id) FROM public.events`).Scan(&ids))
	require.Len(t, ids, 3)
	require.Equal(t, overtaking, ids[0], "the row that committed first keeps its id")
	require.Greater(t, ids[1], overtaking, "the late rows come after it")
	require.NotContains(t, ids, first)

	worker := loginPool(t, db, "pgdrain_worker")
	var head int64
	var token string
	require.NoError(t, worker.QueryRow(ctx, `SELECT id, lease_token::text FROM outbox.claim_batch('public.events', 1)`).Scan(&head, &token))
	require.Equal(t, overtaking, head, "delivered in commit order")
	var poisoned bool
	require.NoError(t, worker.QueryRow(ctx, `SELECT outbox.apply_result('public.events', $1, $2::uuid, 'permanent', 'bad')`, head, token).Scan(&poisoned))
	require.True(t, poisoned)

	operator := loginPool(t, db, "pgdrain_operator")
	var requeued int64
	require.NoError(t, operator.QueryRow(ctx, `SELECT outbox.requeue_poisoned('public.events')`).Scan(&requeued))
	require.EqualValues(t, 1, requeued, "a poisoned row of an identity GENERATED ALWAYS is requeued")
	var tail int64
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT max(id) FROM public.events`).Scan(&tail))
	require.Greater(t, tail, ids[2], "at the tail of its key")
	require.Equal(t, []int64{ids[1], ids[2], tail}, drainOnce(t, worker), "then the key drains in order, the requeued row last")
}
