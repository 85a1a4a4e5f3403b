package gocheck

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pgdrain/pgdrain/internal/testdb"
)

// start_escalation is idempotent while the ladder runs; when the running ladder its insert
// conflicted with completes before it reads that ladder (apply_escalation recording the last step
// from another session), it starts a new ladder and returns its id instead of failing with
// "query returned no rows" (P0002; 40 in 51,872 racing calls before alr 00010). The interleaving is
// forced: a statement trigger after the insert waits on an advisory lock the test holds while it
// completes the ladder.
func TestEscalation_StartRacingTheLadderItsCompletionReturnsARunningLadder(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	db := testdb.New(t)
	policy := ladderPolicy(t, db.Pool, "race", "0s")
	alert, ladder := firingAlert(t, db.Pool, "race", policy, time.Second)

	// Test-only hook in this test's own database: every insert into alr.alert_escalations (also one
	// that inserted nothing: ON CONFLICT DO NOTHING) waits while the test holds advisory lock 4242.
	_, err := db.Pool.Exec(ctx, `
		CREATE FUNCTION public.pause_after_start() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN PERFORM pg_catalog.pg_advisory_xact_lock_shared(4242); RETURN NULL; END $$;
		CREATE TRIGGER pause_after_start AFTER INSERT ON alr.alert_escalations
		  FOR EACH STATEMENT EXECUTE FUNCTION public.pause_after_start();`)
	require.NoError(t, err)
	holder, err := db.Pool.Acquire(ctx)
	require.NoError(t, err)
	defer holder.Release()
	_, err = holder.Exec(ctx, `SELECT pg_advisory_lock(4242)`)
	require.NoError(t, err)
	locked := true
	defer func() {
		if locked {
			_, _ = holder.Exec(context.Background(), `SELECT pg_advisory_unlock(4242)`)
		}
	}()

	type result struct {
		id  string
		err error
	}
	started := make(chan result, 1)
	go func() {
		var r result
		r.err = db.Pool.QueryRow(ctx, `SELECT alr.start_escalation($1::uuid, $2::uuid)::text`, alert, policy).Scan(&r.id)
		started <- r
	}()
	// The start's insert met the running ladder and now waits after it, before reading that ladder.
	require.Eventually(t, func() bool {
		var waiting bool
		require.NoError(t, db.Pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_locks
			WHERE locktype = 'advisory' AND objid = 4242 AND NOT granted)`).Scan(&waiting))
		return waiting
	}, 10*time.Second, 5*time.Millisecond)

	// Meanwhile an engine records the ladder's only step: the ladder completes.
	var applied bool
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT alr.apply_escalation(t.escalation_id, t.lease_token)
		FROM alr.take_due_steps(10, '1 minute') t WHERE t.escalation_id = $1::uuid`, ladder).Scan(&applied))
	require.True(t, applied)
	var reason string
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT stop_reason FROM alr.alert_escalations WHERE id = $1::uuid`, ladder).Scan(&reason))
	require.Equal(t, "completed", reason)

	_, err = holder.Exec(ctx, `SELECT pg_advisory_unlock(4242)`)
	require.NoError(t, err)
	locked = false
	r := <-started
	code, msg := sqlState(r.err)
	require.NoError(t, r.err, "start_escalation failed: %s %s", code, msg)
	require.NotEqual(t, ladder, r.id, "the completed ladder is not running any more")
	var running []string
	rows, err := db.Pool.Query(ctx, `SELECT id::text FROM alr.alert_escalations
		WHERE alert_id = $1::uuid AND policy_id = $2::uuid AND stopped_at IS NULL`, alert, policy)
	require.NoError(t, err)
	for rows.Next() {
		var id string
		require.NoError(t, rows.Scan(&id))
		running = append(running, id)
	}
	require.NoError(t, rows.Err())
	require.Equal(t, []string{r.id}, running, "the id returned is the alert's one running ladder of that policy")
}
