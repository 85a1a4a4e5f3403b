package gocheck

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pgdrain/pgdrain/internal/testdb"
)

// A row a lock-mode batch holds (claim_locked: the row lock is the fence, no lease is written) is
// being delivered: poison_row and dismiss_poisoned (and retry_row, by the same statement) leave it
// alone at once (SKIP LOCKED), never waiting for that transaction, and the batch's settle_locked then records its
// outcome as usual (issue 30 item 3: a row that moved on, or is moving, changes nothing).
func TestOperator_ActionsLeaveRowsALockModeBatchHolds(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testdb.New(t)
	cliExec(t, db.Pool, `SELECT outbox.create_queue('public.held', 'k', max_attempts => 3)`)
	cliExec(t, db.Pool, `SELECT outbox.enqueue('public.held', 'e', '{}', 'a')`)
	cliExec(t, db.Pool, `SELECT outbox.enqueue('public.held', 'e', '{}', 'b')`)
	// a's head (1) is held by a lock-mode batch; b's head (2) is poisoned and row-locked by another
	// transaction (claim_locked skips poisoned rows; a batch that claimed it before it was poisoned
	// by a lowered max_attempts would hold it so).
	rows, err := db.Pool.Query(ctx, `SELECT id, lease_token::text FROM outbox.claim_batch('public.held', 10)`)
	require.NoError(t, err)
	tokens := map[int64]string{}
	for rows.Next() {
		var id int64
		var tok string
		require.NoError(t, rows.Scan(&id, &tok))
		tokens[id] = tok
	}
	require.NoError(t, rows.Err())
	cliExec(t, db.Pool, `SELECT outbox.release('public.held', 1, $1::uuid)`, tokens[1])
	cliExec(t, db.Pool, `SELECT outbox.apply_result('public.held', 2, $1::uuid, 'permanent', '400')`, tokens[2])

	worker := loginAs(t, db, "pgdrain_worker")
	tx, err := worker.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	var held int64
	require.NoError(t, tx.QueryRow(ctx, `SELECT id FROM outbox.claim_locked('public.held', 10)`).Scan(&held))
	require.EqualValues(t, 1, held)
	other, err := db.Pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = other.Rollback(ctx) }()
	_, err = other.Exec(ctx, `SELECT 1 FROM public.held WHERE id = 2 FOR UPDATE`)
	require.NoError(t, err)

	operator := loginAs(t, db, "pgdrain_operator")
	start := time.Now()
	var ok bool
	require.NoError(t, operator.QueryRow(ctx, `SELECT outbox.poison_row('public.held', 1, 0, 'stop')`).Scan(&ok))
	require.False(t, ok, "poison_row leaves a held row alone (pending, 0 attempts: it would be poisoned otherwise)")
	var n int64
	require.NoError(t, operator.QueryRow(ctx, `SELECT outbox.dismiss_poisoned('public.held', '{2}', 'obsolete')`).Scan(&n))
	require.Zero(t, n, "dismiss_poisoned leaves a locked poisoned row alone")
	require.Less(t, time.Since(start), 5*time.Second, "none of them waited for the lock")

	require.NoError(t, tx.QueryRow(ctx, `SELECT outbox.settle_locked('public.held', '{1}', '{sent}')`).Scan(&n))
	require.EqualValues(t, 1, n, "the batch records its outcome as usual")
	require.NoError(t, tx.Commit(ctx))
	require.NoError(t, other.Rollback(ctx))
	require.NoError(t, operator.QueryRow(ctx, `SELECT count(*) FROM outbox.operator_log('public.held')`).Scan(&n))
	require.Zero(t, n, "nothing was logged")
	require.NoError(t, operator.QueryRow(ctx, `SELECT outbox.dismiss_poisoned('public.held', '{2}', 'obsolete')`).Scan(&n))
	require.EqualValues(t, 1, n, "once the lock is gone, the poisoned row is dismissed")
}
