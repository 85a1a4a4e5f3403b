package gocheck

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/pgdrain/pgdrain/drainer"
)

// Run waits out, at start, errors that pass, as a running drainer does: a full connection limit
// (53300: max_connections, or the role's limit), and the registry locked by a DBA's VACUUM FULL
// while the role has a lock_timeout (55P03). Run used to return at once on them, so a deploy or a
// restart during maintenance left the drainer (and the relay) stopped. Run as pgdrain_worker.
func TestDrainer_StartWaitsOutErrorsThatPass(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name string
		// block makes the drainer's start fail and returns what ends it.
		block func(t *testing.T, q *drQueue, role string) (unblock func())
	}{
		{"connection limit", func(t *testing.T, q *drQueue, role string) func() {
			exec(t, q.pool, `ALTER ROLE `+role+` CONNECTION LIMIT 0`)
			return func() { exec(t, q.pool, `ALTER ROLE `+role+` CONNECTION LIMIT -1`) }
		}},
		{"registry locked under a lock_timeout", func(t *testing.T, q *drQueue, role string) func() {
			exec(t, q.pool, `ALTER ROLE `+role+` SET lock_timeout = '100ms'`)
			tx, err := q.pool.Begin(context.Background())
			require.NoError(t, err)
			_, err = tx.Exec(context.Background(), `LOCK TABLE outbox.queues IN ACCESS EXCLUSIVE MODE`)
			require.NoError(t, err)
			return func() { require.NoError(t, tx.Rollback(context.Background())) }
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			q := drNewQueue(t, drQueueOpts{})
			q.enqueue(t, "k", "op", 1)
			login := loginPool(t, q.db, "pgdrain_worker")
			role := pgx.Identifier{login.Config().ConnConfig.User}.Sanitize()
			var unblocked sync.Once
			unblockOnce := c.block(t, q, role)
			unblock := func() { unblocked.Do(unblockOnce) }
			t.Cleanup(unblock) // also when the test fails first: a held lock would hang the cleanup
			pool, err := pgxpool.New(context.Background(), login.Config().ConnString())
			require.NoError(t, err)
			t.Cleanup(pool.Close)

			cfg := q.config(drainer.ClaimLease)
			cfg.ClaimTimeout = time.Second
			logger, buf := drCapture(t)
			d, _ := drNew(t, pool, cfg, func(context.Context, string, drEvent) error { return nil },
				drainer.WithLogger[drEvent](logger))
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			ended := make(chan error, 1)
			go func() { ended <- d.Run(ctx) }()
			drWaitFor(t, 10*time.Second, "a start retried", func() bool {
				return strings.Count(buf.String(), "starting failed; retrying") >= 2
			})
			select {
			case err := <-ended:
				t.Fatalf("Run returned while the error passes: %v", err)
			default:
			}
			unblock()
			drWaitFor(t, 20*time.Second, "the row sent once the start got through", func() bool { return q.sent(t) == 1 })
			cancel()
			err = <-ended
			require.True(t, err == nil || errors.Is(err, context.Canceled), "%v", err)
		})
	}
}

// A claim that keeps failing (here: EXECUTE on claim_batch revoked) is retried with backoff, and
// was logged at every retry, every 5 s at most for as long as it lasted. The first three retries
// are logged at their level, the rest at Debug until a minute has passed.
func TestDrainer_RepeatedRetriesAreLoggedThreeTimesThenQuietly(t *testing.T) {
	t.Parallel()
	q := drNewQueue(t, drQueueOpts{})
	q.enqueue(t, "k", "op", 1)
	_, err := q.pool.Exec(context.Background(),
		`REVOKE EXECUTE ON FUNCTION outbox.claim_batch(text, integer, interval) FROM pgdrain_worker`)
	require.NoError(t, err)
	logger, buf := drCapture(t)
	d, _ := drNew(t, loginPool(t, q.db, "pgdrain_worker"), q.config(drainer.ClaimLease),
		func(context.Context, string, drEvent) error { return nil }, drainer.WithLogger[drEvent](logger))
	stop := drStart(t, d)
	drWaitFor(t, 20*time.Second, "six failed claims", func() bool {
		return strings.Count(buf.String(), `msg="claiming batch failed; retrying"`) >= 6
	})
	require.NoError(t, stop())
	var loud, quiet int
	for _, line := range strings.Split(buf.String(), "\n") {
		if !strings.Contains(line, `msg="claiming batch failed; retrying"`) {
			continue
		}
		switch {
		case strings.Contains(line, "level=ERROR"):
			loud++
		case strings.Contains(line, "level=DEBUG"):
			quiet++
		}
	}
	require.Equal(t, 3, loud, "the first three at their level")
	require.GreaterOrEqual(t, quiet, 3, "the rest at Debug")
}

// After a failed claim the drainer waits out its backoff (100 ms, doubling to 5 s). A NOTIFY ended
// that wait at once, so while producers kept committing (and claims kept failing: here EXECUTE on
// the claim revoked) the drainer retried at the producers' pace. Both modes.
func TestDrainer_FailedClaimsBackOffWhileProducersNotify(t *testing.T) {
	t.Parallel()
	drEachMode(t, func(t *testing.T, mode drainer.ClaimMode) {
		ctx := context.Background()
		q := drNewQueue(t, drQueueOpts{})
		_, err := q.pool.Exec(ctx, `SELECT outbox.set_notify('public.events', 'always');
			REVOKE EXECUTE ON FUNCTION outbox.claim_batch(text, integer, interval) FROM pgdrain_worker;
			REVOKE EXECUTE ON FUNCTION outbox.claim_locked(text, integer) FROM pgdrain_worker`)
		require.NoError(t, err)
		logger, buf := drCapture(t)
		d, _ := drNew(t, loginPool(t, q.db, "pgdrain_worker"), q.config(mode),
			func(context.Context, string, drEvent) error { return nil }, drainer.WithLogger[drEvent](logger))
		stop := drStart(t, d)
		failures := func() int { return strings.Count(buf.String(), "batch failed; retrying") }
		drWaitFor(t, 20*time.Second, "a failed claim", func() bool { return failures() >= 1 })
		start, before := time.Now(), failures()
		for time.Since(start) < 2*time.Second {
			q.enqueue(t, "k", "op", 1) // a commit, and a NOTIFY
			time.Sleep(10 * time.Millisecond)
		}
		n := failures() - before
		require.NoError(t, stop())
		// Backoffs of 0.1 + 0.2 + 0.4 + 0.8 s fit in 2 s, and the first may have begun before.
		require.LessOrEqual(t, n, 6, "%d failed claims in 2 s of producers' NOTIFYs", n)
	})
}

// A LISTEN connection made again (the database restarted, or a failover) ends a failed claim's
// backoff, which a NOTIFY does not (TestDrainer_FailedClaimsBackOffWhileProducersNotify): the
// database is reachable again, and a drainer at the longest backoff (5 s) should not wait it out.
func TestDrainer_ListenReconnectEndsAFailedClaimsBackoff(t *testing.T) {
	t.Parallel()
	drEachMode(t, func(t *testing.T, mode drainer.ClaimMode) {
		ctx := context.Background()
		q := drNewQueue(t, drQueueOpts{})
		q.enqueue(t, "k", "op", 1)
		revoke := `REVOKE EXECUTE ON FUNCTION outbox.claim_batch(text, integer, interval) FROM pgdrain_worker;
			REVOKE EXECUTE ON FUNCTION outbox.claim_locked(text, integer) FROM pgdrain_worker`
		_, err := q.pool.Exec(ctx, revoke)
		require.NoError(t, err)
		logger, buf := drCapture(t)
		worker := loginPool(t, q.db, "pgdrain_worker")
		d, _ := drNew(t, worker, q.config(mode), func(context.Context, string, drEvent) error { return nil },
			drainer.WithLogger[drEvent](logger))
		stop := drStart(t, d)
		defer func() { require.NoError(t, stop()) }()
		drWaitFor(t, 30*time.Second, "a failed claim at the longest backoff", func() bool {
			return strings.Contains(buf.String(), "retry_in=5s")
		})
		_, err = q.pool.Exec(ctx, strings.ReplaceAll(strings.ReplaceAll(revoke, "REVOKE", "GRANT"), "FROM", "TO"))
		require.NoError(t, err)
		pid := drainer.ListenerPID(worker)
		require.NotZero(t, pid)
		start := time.Now()
		_, err = q.pool.Exec(ctx, `SELECT pg_terminate_backend($1)`, int32(pid))
		require.NoError(t, err)
		drWaitFor(t, 10*time.Second, "the row sent", func() bool { return q.sent(t) == 1 })
		took := time.Since(start)
		t.Logf("sent %s after the LISTEN connection was cut", took)
		require.Less(t, took, 3*time.Second, "the reconnected LISTEN ended the 5 s backoff")
	})
}
