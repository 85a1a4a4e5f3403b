package gocheck

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
)

// A result never waits for a claim in progress: while another worker's claim transaction is open
// (in the drainer it is open until its commit's WAL flush), the result of a row leased earlier moves
// that row's partition head on under lock_timeout = 1s (any lock wait fails it with 55P03). The
// open claim walked past the head of the row in flight without locking it, and took the next key.
func TestResults_NeverWaitForAClaimInProgress(t *testing.T) {
	t.Parallel()
	db := orderQueue(t)
	ctx := context.Background()
	producer := loginAs(t, db, "pgdrain_producer")
	a1 := insertEvent(t, producer, "a")
	insertEvent(t, producer, "a")
	b1 := insertEvent(t, producer, "b")

	first := loginAs(t, db, "pgdrain_worker")
	var leased int64
	var token string
	require.NoError(t, first.QueryRow(ctx, `SELECT id, lease_token::text FROM outbox.claim_batch('public.events', 1)`).Scan(&leased, &token))
	require.Equal(t, a1, leased, "the first claim leases a's head")

	second := loginAs(t, db, "pgdrain_worker")
	claim, err := second.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = claim.Rollback(ctx) }()
	var got []int64
	rows, err := claim.Query(ctx, `SELECT id FROM outbox.claim_batch('public.events', 10)`)
	require.NoError(t, err)
	for rows.Next() {
		var id int64
		require.NoError(t, rows.Scan(&id))
		got = append(got, id)
	}
	require.NoError(t, rows.Err())
	require.Equal(t, []int64{b1}, got, "the claim in progress takes b and passes over a, whose row is in flight")

	_, err = first.Exec(ctx, `SET lock_timeout = '1s'`)
	require.NoError(t, err)
	var applied bool
	require.NoError(t, first.QueryRow(ctx,
		`SELECT applied FROM outbox.apply_results('public.events', ARRAY[$1::bigint], ARRAY[$2::uuid], '{sent}')`,
		leased, token).Scan(&applied), "the result did not wait for the claim in progress")
	require.True(t, applied)
	require.NoError(t, claim.Commit(ctx))
}
