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

// The same, with the run's lease run out (its tokens unchanged) and the other worker's claim of
// register still open when the first worker's call starts: the call's snapshot still shows register with the first worker's token, the call waits
// for the claim on register's row, and the claim then commits. Register is refused (its token
// changed), and so must unregister be, though the snapshot never saw register taken.
func TestRuns_ALaterRowIsRefusedWhenTheRunsFirstIsTakenWhileTheCallWaits(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testdb.New(t)
	_, err := db.Pool.Exec(ctx, `SELECT outbox.create_queue('public.rw', 'key');
		INSERT INTO public.rw (event_type, payload, key) VALUES ('register', '{}', 'a');
		INSERT INTO public.rw (event_type, payload, key) VALUES ('unregister', '{}', 'a');`)
	require.NoError(t, err)
	var ids []int64
	var tokens []string
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT array_agg(id ORDER BY id), array_agg(lease_token::text ORDER BY id)
		FROM outbox.claim_runs('public.rw', 10, '1 second', 8)`).Scan(&ids, &tokens))
	require.Len(t, ids, 2)
	time.Sleep(1100 * time.Millisecond) // the run's lease ends, its tokens unchanged

	other, err := db.Pool.Begin(ctx)
	require.NoError(t, err)
	defer other.Rollback(ctx)
	var taken int64
	require.NoError(t, other.QueryRow(ctx, `SELECT id FROM outbox.claim_batch('public.rw', 10)`).Scan(&taken))
	require.Equal(t, ids[0], taken, "another worker takes register, not yet committed")

	type result struct {
		ID      int64
		Applied bool
	}
	done := make(chan []result, 1)
	failed := make(chan error, 1)
	go func() {
		rows, err := db.Pool.Query(ctx, `SELECT id, applied FROM outbox.apply_results('public.rw', $1, $2::uuid[], '{sent,sent}') ORDER BY id`,
			ids, tokens)
		if err == nil {
			var results []result
			results, err = pgx.CollectRows(rows, pgx.RowToStructByPos[result])
			if err == nil {
				done <- results
				return
			}
		}
		failed <- err
	}()
	require.Eventually(t, func() bool {
		var waiting bool
		require.NoError(t, db.Pool.QueryRow(ctx, `SELECT EXISTS (SELECT FROM pg_stat_activity
			WHERE wait_event_type = 'Lock' AND query LIKE '%outbox.apply_results%')`).Scan(&waiting))
		return waiting
	}, 10*time.Second, 10*time.Millisecond, "the first worker's call waits for the claim on register")
	require.NoError(t, other.Commit(ctx))

	select {
	case err := <-failed:
		require.NoError(t, err)
	case results := <-done:
		require.Equal(t, []result{{ids[0], false}, {ids[1], false}}, results,
			"the run is refused from its first refused row on")
	case <-time.After(10 * time.Second):
		t.Fatal("apply_results did not return after the claim committed")
	}
	var sent int
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT count(*) FROM public.rw WHERE sent_at IS NOT NULL`).Scan(&sent))
	require.Zero(t, sent, "unregister is not sent while register is pending with the other worker")
}

// Two workers record results of the same rows: a stale one whose run's leases ran out, and the one
// that claimed the rows again, while a third transaction holds another row of the stale worker's
// (a lock-mode batch, an operator). The stale worker's call waits for the claim, then for the
// third transaction; the other worker's call waits for the stale one. Neither may deadlock: a call
// locks the rows that are still its caller's in id order before it updates any (the rows it waits
// for are taken in one order), and updates only those. Before, the stale call's update of the
// other key's row waited for the other call, which waited for a row the stale call had locked.
func TestRuns_TwoWorkersRecordingTheSameRowsDoNotDeadlock(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testdb.New(t)
	_, err := db.Pool.Exec(ctx, `SELECT outbox.create_queue('public.rd', 'key');
		INSERT INTO public.rd (event_type, payload, key) VALUES ('t', '{}', 'k1'), ('t', '{}', 'k1'), ('t', '{}', 'k2'),
		                                                      ('t', '{}', 'k3'), ('t', '{}', 'k3');`)
	require.NoError(t, err)
	var staleIDs []int64
	var staleTokens []string
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT array_agg(id ORDER BY id), array_agg(lease_token::text ORDER BY id)
		FROM outbox.claim_runs('public.rd', 10, '1 second', 2)`).Scan(&staleIDs, &staleTokens))
	require.Equal(t, []int64{1, 2, 3, 4, 5}, staleIDs)
	_, err = db.Pool.Exec(ctx, `INSERT INTO public.rd (event_type, payload, key) VALUES ('t', '{}', 'k2')`) // 6
	require.NoError(t, err)
	time.Sleep(1100 * time.Millisecond) // the stale worker's leases end, its tokens unchanged

	holder, err := db.Pool.Begin(ctx)
	require.NoError(t, err)
	defer holder.Rollback(ctx)
	_, err = holder.Exec(ctx, `SELECT 1 FROM public.rd WHERE id = 4 FOR UPDATE`)
	require.NoError(t, err)

	claim, err := db.Pool.Begin(ctx)
	require.NoError(t, err)
	defer claim.Rollback(ctx)
	var freshIDs []int64
	var freshTokens []string
	require.NoError(t, claim.QueryRow(ctx, `SELECT array_agg(id ORDER BY id), array_agg(lease_token::text ORDER BY id)
		FROM outbox.claim_runs('public.rd', 10, '30 seconds', 2)`).Scan(&freshIDs, &freshTokens))
	require.Equal(t, []int64{1, 2, 3, 6}, freshIDs, "k1's run and k2's run claimed again; k3's head is locked")

	type result struct {
		ID      int64
		Applied bool
	}
	record := func(ids []int64, tokens []string, outcomes []string) (chan []result, chan error) {
		done, failed := make(chan []result, 1), make(chan error, 1)
		go func() {
			rows, err := db.Pool.Query(ctx, `SELECT id, applied FROM outbox.apply_results('public.rd', $1, $2::uuid[], $3) ORDER BY id`,
				ids, tokens, outcomes)
			if err == nil {
				var results []result
				if results, err = pgx.CollectRows(rows, pgx.RowToStructByPos[result]); err == nil {
					done <- results
					return
				}
			}
			failed <- err
		}()
		return done, failed
	}
	waiting := func(n int, why string) {
		t.Helper()
		require.Eventually(t, func() bool {
			var calls int
			require.NoError(t, db.Pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
				WHERE wait_event_type = 'Lock' AND query LIKE '%outbox.apply_results%'`).Scan(&calls))
			return calls == n
		}, 10*time.Second, 10*time.Millisecond, why)
	}
	staleDone, staleFailed := record(staleIDs, staleTokens, []string{"sent", "sent", "sent", "sent", "sent"})
	waiting(1, "the stale worker's call waits for the claim of its rows")
	require.NoError(t, claim.Commit(ctx))
	// The other worker delivered k1's first row with a transient failure (and gives its second back)
	// and k2's run.
	freshDone, freshFailed := record([]int64{1, 3, 6}, []string{freshTokens[0], freshTokens[2], freshTokens[3]},
		[]string{"transient", "sent", "sent"})
	waiting(2, "both calls wait: the stale one for row 4's holder, the other for the stale one")
	require.NoError(t, holder.Commit(ctx))

	collect := func(done chan []result, failed chan error) []result {
		t.Helper()
		select {
		case err := <-failed:
			require.NoError(t, err, "no call may fail (40P01 is a deadlock)")
		case results := <-done:
			return results
		case <-time.After(10 * time.Second):
			t.Fatal("apply_results did not return")
		}
		return nil
	}
	require.Equal(t, []result{{1, false}, {2, false}, {3, false}, {4, true}, {5, true}}, collect(staleDone, staleFailed),
		"the stale worker records only k3's run, still its own")
	require.Equal(t, []result{{1, true}, {3, true}, {6, true}}, collect(freshDone, freshFailed))
}
