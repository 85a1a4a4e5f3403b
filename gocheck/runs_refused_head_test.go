package gocheck

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/pgdrain/pgdrain/internal/testdb"
)

// A worker records its run (register, then unregister of key a) in one apply_results call after
// the run's first row was taken from it: an operator gave that lease back (release_lease) and
// another worker claimed the row. The call refuses the first row (not its token any more) and so
// refuses the key's later row too: recorded sent, unregister would be delivered while register,
// before it, was still pending, and register would then come after it. Once the other worker
// records register, unregister is the key's head again and is claimed (when the first worker's
// one-second lease on it has ended).
func TestRuns_ALaterRowIsRefusedWhenTheRunsFirstWasTakenAgain(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testdb.New(t)
	_, err := db.Pool.Exec(ctx, `SELECT outbox.create_queue('public.rr', 'key');
		INSERT INTO public.rr (event_type, payload, key) VALUES ('register', '{}', 'a');
		INSERT INTO public.rr (event_type, payload, key) VALUES ('unregister', '{}', 'a');`)
	require.NoError(t, err)
	type leased struct {
		ID    int64
		Token string
		Type  string
	}
	claim := func(sql string) []leased {
		t.Helper()
		rows, err := db.Pool.Query(ctx, sql)
		require.NoError(t, err)
		got, err := pgx.CollectRows(rows, pgx.RowToStructByPos[leased])
		require.NoError(t, err)
		return got
	}
	run := claim(`SELECT id, lease_token::text, event_type FROM outbox.claim_runs('public.rr', 10, '1 second', 8) ORDER BY id`)
	require.Len(t, run, 2)
	_, err = db.Pool.Exec(ctx, `SELECT outbox.release_lease('public.rr', $1)`, run[0].ID)
	require.NoError(t, err)
	again := claim(`SELECT id, lease_token::text, event_type FROM outbox.claim_batch('public.rr', 10)`)
	require.Equal(t, []leased{{run[0].ID, again[0].Token, "register"}}, again, "another worker took register")

	rows, err := db.Pool.Query(ctx, `SELECT id, applied FROM outbox.apply_results('public.rr', $1, $2::uuid[], '{sent,sent}') ORDER BY id`,
		[]int64{run[0].ID, run[1].ID}, []string{run[0].Token, run[1].Token})
	require.NoError(t, err)
	type result struct {
		ID      int64
		Applied bool
	}
	results, err := pgx.CollectRows(rows, pgx.RowToStructByPos[result])
	require.NoError(t, err)
	require.Equal(t, []result{{run[0].ID, false}, {run[1].ID, false}}, results,
		"the run is refused from its first refused row on")
	var sent int
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT count(*) FROM public.rr WHERE sent_at IS NOT NULL`).Scan(&sent))
	require.Zero(t, sent, "unregister is not sent while register is pending")

	var applied bool
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT outbox.apply_result('public.rr', $1, $2::uuid, 'sent')`,
		again[0].ID, again[0].Token).Scan(&applied))
	require.True(t, applied)
	// unregister is the key's head again, parked until the first worker's lease on it ends.
	var next []leased
	require.Eventually(t, func() bool {
		next = claim(`SELECT id, lease_token::text, event_type FROM outbox.claim_batch('public.rr', 10)`)
		return len(next) > 0
	}, 10*time.Second, 50*time.Millisecond)
	require.Len(t, next, 1)
	require.Equal(t, "unregister", next[0].Type, "then unregister, after register")
}
