package gocheck

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
)

// A repair in the transaction that requeued poisoned rows reports nothing for them: their heads
// are made by that transaction's commit step, as a producer's are. It reported (and, not dry,
// "fixed" and counted) a missing head, which the docs call a bug to report.
func TestRepair_InTheRequeueTransactionFindsNothingToRepair(t *testing.T) {
	t.Parallel()
	db := orderQueue(t)
	ctx := context.Background()
	producer := loginAs(t, db, "pgdrain_producer")
	id := insertEvent(t, producer, "k")
	op := loginAs(t, db, "pgdrain_operator")
	_, err := op.Exec(ctx, `SELECT outbox.poison_row('public.events', $1, 0, 'peer rejected it')`, id)
	require.NoError(t, err)

	tx, err := op.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	var requeued int64
	require.NoError(t, tx.QueryRow(ctx, `SELECT outbox.requeue_poisoned('public.events', ARRAY[$1::bigint])`, id).Scan(&requeued))
	require.EqualValues(t, 1, requeued)
	var problems int
	require.NoError(t, tx.QueryRow(ctx, `SELECT count(*) FROM outbox.repair('public.events', true)`).Scan(&problems))
	require.Zero(t, problems, "nothing to repair: the commit step makes the requeued row's head")
	require.NoError(t, tx.Commit(ctx))

	require.Len(t, drainOnce(t, db.Pool), 1, "the requeued row is claimable after the commit")
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT count(*) FROM outbox.repair('public.events', true)`).Scan(&problems))
	require.Zero(t, problems)
}
