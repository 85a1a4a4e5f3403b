package gocheck

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pgdrain/pgdrain/internal/testdb"
)

// A head refresh that waited for another transaction moving the same head must not write over it
// with what its own, older snapshot found. Here a worker holds a run of key a (rows X and Y); the
// result of X (sent) is being recorded in an open transaction when the worker gives Y back: the
// release's refresh waits for the head, then (before) pointed it back at X, which its snapshot saw
// unsent, parked until X's lease ended, 30 s on, while Y was ready and no claim looked at it. The
// same with an operator's poison_row of a head that had a day's backoff: parked for a day. Now the
// refresh looks again with a newer snapshot, and Y is claimable at once.
func TestHeads_RefreshAfterAConcurrentMoveLeavesTheNextRowClaimable(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testdb.New(t)
	_, err := db.Pool.Exec(ctx, `SELECT outbox.create_queue('public.rp', 'key');
		INSERT INTO public.rp (event_type, payload, key) VALUES ('e', '{}', 'a');
		INSERT INTO public.rp (event_type, payload, key) VALUES ('e', '{}', 'a');`)
	require.NoError(t, err)
	type leased struct {
		id    int64
		token string
	}
	var run []leased
	rows, err := db.Pool.Query(ctx, `SELECT id, lease_token::text FROM outbox.claim_runs('public.rp', 10, '30 seconds', 8) ORDER BY id`)
	require.NoError(t, err)
	for rows.Next() {
		var l leased
		require.NoError(t, rows.Scan(&l.id, &l.token))
		run = append(run, l)
	}
	require.NoError(t, rows.Err())
	require.Len(t, run, 2, "the run of key a")
	x, y := run[0], run[1]

	result, err := db.Pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = result.Rollback(ctx) }()
	var applied bool
	require.NoError(t, result.QueryRow(ctx, `SELECT outbox.apply_result('public.rp', $1, $2::uuid, 'sent')`, x.id, x.token).Scan(&applied))
	require.True(t, applied)

	released := make(chan error, 1)
	go func() {
		var ok bool
		err := db.Pool.QueryRow(ctx, `SELECT outbox.release('public.rp', $1, $2::uuid)`, y.id, y.token).Scan(&ok)
		if err == nil && !ok {
			err = errors.New("release returned false: the lease was not ours")
		}
		released <- err
	}()
	require.Eventually(t, func() bool {
		var waiting int
		_ = db.Pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE wait_event_type = 'Lock' AND query LIKE '%outbox.release%'`).Scan(&waiting)
		return waiting == 1
	}, 10*time.Second, 10*time.Millisecond, "the release waits for the head the result holds")
	require.NoError(t, result.Commit(ctx))
	require.NoError(t, <-released)

	var claimed []int64
	rows, err = db.Pool.Query(ctx, `SELECT id FROM outbox.claim_batch('public.rp', 10)`)
	require.NoError(t, err)
	for rows.Next() {
		var id int64
		require.NoError(t, rows.Scan(&id))
		claimed = append(claimed, id)
	}
	require.NoError(t, rows.Err())
	require.Equal(t, []int64{y.id}, claimed, "the key's next row, given back, is claimed at once")
	var problems int
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT count(*) FROM outbox.repair('public.rp', true)`).Scan(&problems))
	require.Zero(t, problems)
}
