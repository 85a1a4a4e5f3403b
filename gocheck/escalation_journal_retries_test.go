package gocheck

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/pgdrain/pgdrain/escalation"
	"github.com/pgdrain/pgdrain/internal/testdb"
)

// A step delivered after its lease ended (a batch slower than its lease: the seed's "ordinary
// evening when one channel hangs") whose journal call meets a database gone for a moment is
// journaled by the retry. Before, the journal's retries were bounded by the step's lease, which
// the record had already ended: the single failed attempt was the last, the delivery had no journal
// row, and alr.unjournaled_steps reported the page that had been sent as "probably never
// delivered; page its target by hand": a second page, by a person.
func TestEscalation_AJournalFailingAfterTheStepsLeaseIsRetried(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	db := testdb.New(t)
	policy := ladderPolicy(t, db.Pool, "slow", "0s", "1 hour")
	_, ladder := firingAlert(t, db.Pool, "payments down", policy, time.Second)

	pool, proxy := droppedWorkerPool(t, db, "record_delivery", false)
	const lease = 300 * time.Millisecond
	slow := escalation.NotifierFunc(func(ctx context.Context, s escalation.Step) error {
		time.Sleep(3 * lease) // delivered, but after the step's lease ended
		return nil
	})
	engine := newEngine(t, pool, map[string]escalation.Notifier{"slow": slow}, escalation.Config{Lease: lease})
	res, err := engine.RunOnce(ctx)
	require.NoError(t, err)
	require.True(t, proxy.fired.Load(), "the first journal call was dropped")
	require.Equal(t, 1, res.Delivered, "%+v", res)
	require.Equal(t, map[string]int{ladder + ":0": 1}, deliveriesPerStep(t, db.Pool), "the delivery is journaled, once")
	var unjournaled int
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT count(*) FROM alr.unjournaled_steps(interval '0')`).Scan(&unjournaled))
	require.Zero(t, unjournaled, "no step is reported as recorded and never journaled")
}

// An engine whose role has a lock_timeout (a DBA's setting for every application role) journals a
// delivery whose ladder row another transaction holds for longer than that: the journal call that
// the server ended with 55P03 is retried, as the drainer retries its results on lock_timeout,
// statement_timeout, deadlocks and serialization failures (docs/operations.md). Before, only a
// database that did not answer was retried: the delivery had no journal row, and
// alr.unjournaled_steps reported the page that had been sent as probably never delivered.
func TestEscalation_AJournalEndedByTheRolesLockTimeoutIsRetried(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	db := testdb.New(t)
	policy := ladderPolicy(t, db.Pool, "telegram", "0s", "1 hour")
	_, ladder := firingAlert(t, db.Pool, "payments down", policy, time.Second)

	workerURL := loginURL(t, db, "pgdrain_worker")
	_, err := db.Pool.Exec(ctx, "ALTER ROLE "+pgx.Identifier{urlUser(t, workerURL)}.Sanitize()+" SET lock_timeout = '50ms'")
	require.NoError(t, err)
	pool, err := pgxpool.New(ctx, workerURL)
	require.NoError(t, err)
	t.Cleanup(pool.Close)

	var held sync.WaitGroup
	t.Cleanup(held.Wait)
	locking := escalation.NotifierFunc(func(ctx context.Context, s escalation.Step) error {
		// Someone holds the ladder's row while the engine journals (a console, another engine's
		// take, a migration): longer than the role's lock_timeout, shorter than the retries.
		tx, err := db.Pool.Begin(ctx)
		if err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `SELECT 1 FROM alr.alert_escalations WHERE id = $1::uuid FOR UPDATE`, s.EscalationID); err != nil {
			_ = tx.Rollback(ctx)
			return err
		}
		held.Go(func() {
			time.Sleep(500 * time.Millisecond)
			_ = tx.Commit(context.Background())
		})
		return nil
	})
	engine := newEngine(t, pool, map[string]escalation.Notifier{"telegram": locking}, escalation.Config{})
	res, err := engine.RunOnce(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, res.Delivered, "%+v", res)
	require.Equal(t, map[string]int{ladder + ":0": 1}, deliveriesPerStep(t, db.Pool), "the delivery is journaled, once")
}
