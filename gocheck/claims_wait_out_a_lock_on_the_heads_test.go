package gocheck

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
)

// Another session holding a lock on the heads table that conflicts with a claim's (TRUNCATE, VACUUM
// FULL, autovacuum truncating the table's end, LOCK TABLE), or waiting for one, makes claims wait
// for it, as on any table. A claim that found wake notes applied them with lock_timeout 1 ms (so that it never waits
// for a head another open batch is making), and its statements outside the blocks that catch the
// timeout failed at once with 55P03 instead of waiting (a hostile run that truncated the unlogged
// tables: about 2,000 failed claims). They now wait like the rest of the claim, and the notes are
// applied. Both claim modes, as pgdrain_worker.
func TestClaims_WithWakeNotesWaitOutAnotherSessionsLockOnTheHeads(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ mode, how string }{{"lease", "held"}, {"lock", "held"}, {"lease", "queued"}, {"lock", "queued"}} {
		mode, how := c.mode, c.how
		t.Run(mode+" "+how, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			db := orderQueue(t)
			// A SERIALIZABLE producer leaves a wake note instead of a head.
			producer := loginAs(t, db, "pgdrain_producer")
			tx, err := producer.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.Serializable})
			require.NoError(t, err)
			first := insertEvent(t, tx, "a")
			require.NoError(t, tx.Commit(ctx))
			require.Equal(t, 1, wakeNotes(t, db.Pool), "the producer left a wake note")

			// Another session holds the heads table, or waits for it behind a reader (as autovacuum
			// truncating its end does); the claim waits too, then goes on.
			if how == "held" {
				holder, err := db.Pool.Begin(ctx)
				require.NoError(t, err)
				defer func() { _ = holder.Rollback(ctx) }()
				_, err = holder.Exec(ctx, `LOCK TABLE outbox.partition_heads IN ACCESS EXCLUSIVE MODE`)
				require.NoError(t, err)
				time.AfterFunc(300*time.Millisecond, func() { _ = holder.Commit(ctx) })
			} else {
				reader, err := db.Pool.Begin(ctx)
				require.NoError(t, err)
				defer func() { _ = reader.Rollback(ctx) }()
				_, err = reader.Exec(ctx, `SELECT count(*) FROM outbox.partition_heads`)
				require.NoError(t, err)
				locked := make(chan error, 1)
				go func() {
					_, err := db.Pool.Exec(ctx, `BEGIN; LOCK TABLE outbox.partition_heads IN ACCESS EXCLUSIVE MODE; COMMIT`)
					locked <- err
				}()
				waitForLockWaiters(t, db.Pool, 1)
				time.AfterFunc(300*time.Millisecond, func() { _ = reader.Commit(ctx) })
				defer func() { require.NoError(t, <-locked) }()
			}

			worker := loginAs(t, db, "pgdrain_worker")
			var claimed []int64
			switch mode {
			case "lease":
				claimed = idsOf(t, worker, `SELECT id FROM outbox.claim_batch('public.events', 10, '1 minute')`)
			case "lock":
				tx, err := worker.Begin(ctx)
				require.NoError(t, err)
				defer func() { _ = tx.Rollback(ctx) }()
				claimed = idsOf(t, tx, `SELECT id FROM outbox.claim_locked('public.events', 10)`)
				require.NoError(t, tx.Commit(ctx)) // the batch ends (its row not settled: still pending)
			}
			require.Equal(t, []int64{first}, claimed, "the claim waited for the lock and took a's row")
			require.Zero(t, wakeNotes(t, db.Pool), "and applied the note")
		})
	}
}

// wakeNotes counts the wake notes left for the queue's claims.
func wakeNotes(t *testing.T, db interface {
	QueryRow(context.Context, string, ...any) pgx.Row
}) int {
	t.Helper()
	var n int
	require.NoError(t, db.QueryRow(context.Background(), `SELECT count(*)::int FROM outbox.partition_wakes`).Scan(&n))
	return n
}

// waitForLockWaiters waits until n sessions of the pool's database wait for a lock on the heads table.
func waitForLockWaiters(t *testing.T, pool interface {
	QueryRow(context.Context, string, ...any) pgx.Row
}, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		var waiting int
		require.NoError(t, pool.QueryRow(context.Background(), `SELECT count(*)::int FROM pg_locks
			WHERE NOT granted AND relation = 'outbox.partition_heads'::regclass
			  AND database = (SELECT oid FROM pg_database WHERE datname = current_database())`).Scan(&waiting))
		if waiting >= n {
			return
		}
		require.True(t, time.Now().Before(deadline), "%d sessions waiting for a lock, want %d", waiting, n)
		time.Sleep(10 * time.Millisecond)
	}
}
