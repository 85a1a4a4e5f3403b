package gocheck

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/pgdrain/pgdrain/drainer"
)

// An Applier that honours its context and times out (a peer that does not answer) returns a moment
// after its ctx ended. In lock mode with ApplyConcurrency > 1 (or a batch whose last wave used the
// whole bound) that deadline is the batch's settle time itself, and the batch stopped waiting at
// exactly that instant: the timeout's result was dropped as if the Applier ignored its context
// ("an Applier ignores its context" at Warn), no attempt was counted, no backoff set, no last_error
// written, and the row was claimed again at once, for ever: a peer that never answers never
// poisoned its row, and every batch waited for it.
func TestDrainer_LockMode_AnApplyThatTimesOutOnItsContextIsRecorded(t *testing.T) {
	t.Parallel()
	q := drNewQueue(t, drQueueOpts{maxAttempts: 3})
	id := q.enqueue(t, "a", "hang", 1)
	var calls atomic.Int32
	apply := func(ctx context.Context, _ string, e drEvent) error {
		calls.Add(1)
		<-ctx.Done() // a peer that never answers; the Applier honours its context
		return ctx.Err()
	}
	logger, buf := drCapture(t)
	cfg := q.config(drainer.ClaimLock)
	cfg.ApplyConcurrency = 2
	cfg.ApplyTimeout = 200 * time.Millisecond
	d, _ := drNew(t, q.pool, cfg, apply, drainer.WithLogger[drEvent](logger))
	stop := drStart(t, d)
	// Three attempts, each ApplyTimeout, then the queue's backoff (at most 200ms): poisoned
	// within a few seconds. Before the fix the row was claimed again and again with no attempt
	// counted.
	drWaitFor(t, 10*time.Second, "the row poisoned after max_attempts timeouts", func() bool {
		return q.count(t, `SELECT count(*) FROM public.events WHERE id = $1 AND attempt_count = 3`, id) == 1
	})
	require.NoError(t, stop())
	require.Equal(t, int32(3), calls.Load(), "one apply per attempt")
	var lastError string
	require.NoError(t, q.pool.QueryRow(context.Background(),
		`SELECT last_error FROM public.events WHERE id = $1`, id).Scan(&lastError))
	require.Contains(t, lastError, "context deadline exceeded")
	require.NotContains(t, buf.String(), "an Applier ignores its context",
		"an Applier that returned on its context is not blamed for ignoring it")
}

// A pool that reads results as text (default_query_exec_mode exec or simple_protocol, as
// docs/pgbouncer.md asks behind a transaction pooler) gets times and intervals in the session's
// DateStyle and IntervalStyle, which a DBA may set for the role or the database; pgx parses only
// the ISO and postgres styles. Under DateStyle 'SQL, DMY' or 'German' every claim failed to scan
// its created_at, after leasing its rows (lease mode), for ever: nothing was delivered, and the
// log said only "invalid PostgreSQL date/time value". Under IntervalStyle iso_8601 or
// postgres_verbose, Run failed at start reading backoff_min. The drainer's results no longer
// depend on those settings.
func TestDrainer_TextResultsUnderUnusualDateAndIntervalStyles(t *testing.T) {
	t.Parallel()
	settings := []struct{ name, value string }{
		{"DateStyle", "SQL, DMY"},
		{"DateStyle", "German"},
		{"IntervalStyle", "iso_8601"},
		{"IntervalStyle", "postgres_verbose"},
		{"TimeZone", "Asia/Kathmandu"},
	}
	for _, s := range settings {
		for _, exec := range []string{"exec", "simple_protocol"} {
			for _, mode := range drModes {
				t.Run(fmt.Sprintf("%s=%s/%s/%s", s.name, s.value, exec, mode), func(t *testing.T) {
					t.Parallel()
					q := drNewQueue(t, drQueueOpts{partitionColumn: "key_id"})
					cfg, err := pgxpool.ParseConfig(q.db.URL)
					require.NoError(t, err)
					cfg.ConnConfig.DefaultQueryExecMode = map[string]pgx.QueryExecMode{
						"exec": pgx.QueryExecModeExec, "simple_protocol": pgx.QueryExecModeSimpleProtocol}[exec]
					cfg.ConnConfig.RuntimeParams[s.name] = s.value
					pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
					require.NoError(t, err)
					t.Cleanup(pool.Close)
					for i := range 6 {
						q.enqueue(t, fmt.Sprintf("k%d", i%3), "op", i)
					}
					before := time.Now().Add(-time.Minute)
					var badCreatedAt atomic.Int32
					c := q.config(mode)
					c.RunLength = 2
					c.ExpectBackoffMin, c.ExpectBackoffMax = 50*time.Millisecond, 200*time.Millisecond
					c.WedgeWarnAfter = drainer.MinWedgeWarnAfter
					logger, buf := drCapture(t)
					d, _ := drNew(t, pool, c, func(ctx context.Context, _ string, e drEvent) error {
						ev, _ := drainer.EventFrom(ctx)
						if ev.CreatedAt.Before(before) || ev.CreatedAt.After(time.Now().Add(time.Minute)) {
							badCreatedAt.Add(1)
						}
						return nil
					}, drainer.WithLogger[drEvent](logger),
						drainer.WithWedgeObserver[drEvent](func(context.Context, []drainer.WedgedPartition) {}))
					stop := drStart(t, d)
					drWaitFor(t, 10*time.Second, "every row sent", func() bool { return q.sent(t) == 6 })
					require.NoError(t, stop())
					require.Zero(t, badCreatedAt.Load(), "Event.CreatedAt is the row's created_at")
					require.NotContains(t, buf.String(), "level=ERROR")
				})
			}
		}
	}
}

// A role's idle_session_timeout shorter than pgxpool's ping-on-acquire idle time (1s) ends pooled
// connections that the pool hands out unchecked: the next statement on one fails with 57P05
// ("terminating connection due to idle-session timeout") without having run. That error was not
// taken for a lost connection: a lease-mode flush of results failed with it was dropped at once,
// and with applies longer than the timeout every flush met such a connection, so no result was
// ever recorded and every row was applied again and again (logged at Error). It is retried, on
// another connection, like any lost connection.
func TestDrainer_ARolesShortIdleSessionTimeoutCostsNoResult(t *testing.T) {
	t.Parallel()
	drEachMode(t, func(t *testing.T, mode drainer.ClaimMode) {
		q := drNewQueue(t, drQueueOpts{})
		cfg, err := pgxpool.ParseConfig(q.db.URL)
		require.NoError(t, err)
		cfg.ConnConfig.RuntimeParams["idle_session_timeout"] = "300" // as ALTER ROLE ... SET would
		pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
		require.NoError(t, err)
		t.Cleanup(pool.Close)
		var calls atomic.Int32
		logger, buf := drCapture(t)
		c := q.config(mode)
		c.ApplyTimeout, c.Lease = 2*time.Second, 5*time.Second
		d, _ := drNew(t, pool, c, func(ctx context.Context, _ string, e drEvent) error {
			calls.Add(1)
			time.Sleep(600 * time.Millisecond) // longer than the idle_session_timeout
			return nil
		}, drainer.WithLogger[drEvent](logger))
		stop := drStart(t, d)
		for i := range 3 {
			q.enqueue(t, fmt.Sprintf("k%d", i), "op", i)
			time.Sleep(900 * time.Millisecond)
		}
		drWaitFor(t, 20*time.Second, "every row sent", func() bool { return q.sent(t) == 3 })
		require.NoError(t, stop())
		require.Equal(t, int32(3), calls.Load(), "each row applied once: no result was dropped")
		require.NotContains(t, buf.String(), "level=ERROR")
	})
}
