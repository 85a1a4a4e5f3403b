package gocheck

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pgdrain/pgdrain/internal/testdb"
)

// A result that steps a head over a poisoned row raises the head's floor past it, under the head's
// lock, when the head's version is an earlier transaction's (every lease-mode result): claims and
// head moves then start past the poisoned row. And a floor a wake note lowered is raised the same way.
// (In the transaction that wrote the head's version the floor stays: sql/tests
// apply_results/head_floor_follows_sent_rows.)
func TestHeads_FloorRisesPastPoisonedRowsInTheNextTransaction(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	ctx := context.Background()
	_, err := db.Pool.Exec(ctx, `SELECT outbox.create_queue('public.events', 'resource_id', max_attempts => 3)`)
	require.NoError(t, err)
	producer := loginAs(t, db, "pgdrain_producer")
	var rows []int64
	for range 4 {
		rows = append(rows, insertEvent(t, producer, "a"))
	}
	worker := loginAs(t, db, "pgdrain_worker")
	record := func(want int64, outcome string) {
		t.Helper()
		var id int64
		var token string
		require.NoError(t, worker.QueryRow(ctx, `SELECT id, lease_token::text FROM outbox.claim_batch('public.events', 10)`).Scan(&id, &token))
		require.Equal(t, want, id)
		var applied bool
		require.NoError(t, worker.QueryRow(ctx,
			`SELECT applied FROM outbox.apply_results('public.events', ARRAY[$1::bigint], ARRAY[$2::uuid], ARRAY[$3])`,
			id, token, outcome).Scan(&applied))
		require.True(t, applied)
	}
	head := func() [2]int64 {
		t.Helper()
		var h [2]int64
		require.NoError(t, db.Pool.QueryRow(ctx, `SELECT head_id, floor_id FROM outbox.partition_heads WHERE partition_key = 'a'`).Scan(&h[0], &h[1]))
		return h
	}
	record(rows[0], "sent")
	require.Equal(t, [2]int64{rows[1], rows[1]}, head())
	record(rows[1], "permanent")
	require.Equal(t, [2]int64{rows[2], rows[2]}, head(), "past the poisoned row: head and floor at the third row")
	_, err = db.Pool.Exec(ctx, `UPDATE outbox.partition_heads SET floor_id = $1 WHERE partition_key = 'a'`, rows[0])
	require.NoError(t, err)
	record(rows[2], "sent")
	require.Equal(t, [2]int64{rows[3], rows[3]}, head(), "a lowered floor is raised past the poisoned row too")
}
