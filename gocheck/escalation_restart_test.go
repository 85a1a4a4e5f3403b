package gocheck

import (
	"context"
	"log/slog"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/pgdrain/pgdrain/escalation"
	"github.com/pgdrain/pgdrain/internal/testdb"
)

// escCounter is a Notifier that counts deliveries per step (Step.IdempotencyKey).
type escCounter struct {
	mu sync.Mutex
	n  map[string]int
}

func (c *escCounter) Notify(_ context.Context, s escalation.Step) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.n[s.IdempotencyKey()]++
	return nil
}

func (c *escCounter) counts() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make(map[string]int, len(c.n))
	for k, v := range c.n {
		out[k] = v
	}
	return out
}

// escStartLadders starts n ladders of one policy with steps 0s, 1s, 1s, 1s on channel "test".
func escStartLadders(t *testing.T, pool *pgxpool.Pool, n int) {
	t.Helper()
	_, err := pool.Exec(context.Background(), `
		SELECT alr.start_escalation(alr.add_alert('alert ' || g), p.id)
		FROM (SELECT alr.create_policy('restart', '[{"delay": "0s", "channel": "test", "target": "a"},
		                                            {"delay": "1s", "channel": "test", "target": "b"},
		                                            {"delay": "1s", "channel": "test", "target": "c"},
		                                            {"delay": "1s", "channel": "test", "target": "d"}]') AS id) p,
		     generate_series(1, $1) g`, n)
	require.NoError(t, err)
}

// escRecordedSteps returns every step the ladders recorded (applied), as idempotency keys.
func escRecordedSteps(t *testing.T, pool *pgxpool.Pool) []string {
	t.Helper()
	rows, err := pool.Query(context.Background(), `
		SELECT e.id::text || ':' || s FROM alr.alert_escalations e, generate_series(0, e.step_idx - 1) s`)
	require.NoError(t, err)
	keys, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	return keys
}

// The escalation engine survives a restart of the server under it (pg_ctl restart -m fast, and a
// stop long enough that an engine is started while no server runs): no Run returns, every ladder
// completes, no step is delivered twice, and a step is recorded without delivery only where the
// engine logged that a commit's answer was lost (the documented at-most-once per step). What the
// engine logged about the outage is at Warn with a cause. Run as pgdrain_worker.
func TestEscalation_SurvivesServerRestart(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	cluster := startOwnCluster(t)
	admin, err := pgx.Connect(ctx, cluster.postgresURL)
	require.NoError(t, err)
	_, err = admin.Exec(ctx, `CREATE DATABASE escrestart`)
	require.NoError(t, err)
	require.NoError(t, admin.Close(ctx))
	dsn := testdb.WithDatabase(cluster.postgresURL, "escrestart")
	require.NoError(t, testdb.MigrateUp(ctx, dsn))
	pool, err := pgxpool.New(ctx, dsn)
	require.NoError(t, err)
	defer pool.Close()
	_, err = pool.Exec(ctx, `CREATE ROLE esc_worker LOGIN NOSUPERUSER IN ROLE pgdrain_worker`)
	require.NoError(t, err)
	u, err := url.Parse(dsn)
	require.NoError(t, err)
	u.User = url.User("esc_worker")
	worker, err := pgxpool.New(ctx, u.String())
	require.NoError(t, err)
	defer worker.Close()

	const ladders, steps = 200, 4
	escStartLadders(t, pool, ladders)
	peer := &escCounter{n: map[string]int{}}
	logBuf := &syncBuffer{}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("engine log:\n%s", logBuf.String())
		}
	})
	logger := slog.New(slog.NewTextHandler(logBuf, &slog.HandlerOptions{Level: slog.LevelWarn}))
	cfg := escalation.Config{BatchSize: 20, Lease: 3 * time.Second, Tick: 100 * time.Millisecond,
		StepTimeout: time.Second, DBTimeout: 2 * time.Second, Logger: logger}
	engine, err := escalation.New(worker, map[string]escalation.Notifier{"test": peer}, cfg)
	require.NoError(t, err)

	runCtx, stop := context.WithCancel(ctx)
	runErrs := make(chan error, 2)
	var wg sync.WaitGroup
	wg.Go(func() { runErrs <- engine.Run(runCtx) })
	defer func() { stop(); wg.Wait() }()

	delivered := func() int {
		n := 0
		for _, c := range peer.counts() {
			n += c
		}
		return n
	}
	require.Eventually(t, func() bool { return delivered() >= ladders*steps/4 }, time.Minute, 20*time.Millisecond)
	require.NoError(t, cluster.pgCtl("restart", "-m", "fast"))
	require.Less(t, delivered(), ladders*steps, "the restart came in the middle of the ladders")

	// A stop long enough to start a second engine while no server runs: it waits, then works.
	require.NoError(t, cluster.pgCtl("stop", "-m", "fast"))
	second, err := escalation.New(worker, map[string]escalation.Notifier{"test": peer}, cfg)
	require.NoError(t, err)
	wg.Go(func() { runErrs <- second.Run(runCtx) })
	require.Eventually(t, func() bool {
		return strings.Contains(logBuf.String(), "starting the escalation engine failed; retrying (database unavailable)")
	}, 30*time.Second, 20*time.Millisecond)
	require.NoError(t, cluster.pgCtl("start")) // on the same port

	completed := func() int64 {
		var n int64
		_ = pool.QueryRow(ctx, `SELECT count(*) FROM alr.alert_escalations WHERE stop_reason = 'completed'`).Scan(&n)
		return n
	}
	require.Eventually(t, func() bool { return completed() == ladders }, 2*time.Minute, 50*time.Millisecond,
		"every ladder completes after the restart")
	select {
	case err := <-runErrs:
		t.Fatalf("an engine's Run returned during the outage: %v", err)
	default:
	}

	counts := peer.counts()
	for key, n := range counts {
		require.Equal(t, 1, n, "step %s delivered once", key)
	}
	recorded := escRecordedSteps(t, pool)
	require.Len(t, recorded, ladders*steps)
	var lost []string
	for _, key := range recorded {
		if counts[key] == 0 {
			lost = append(lost, key)
		}
	}
	log := logBuf.String()
	lostLogged := strings.Count(log, "escalation step may be recorded without delivery")
	require.LessOrEqual(t, len(lost), lostLogged,
		"a step is recorded without delivery only where the engine logged a lost commit: %v", lost)
	require.Contains(t, log, "(database unavailable)")
	require.Contains(t, log, "cause=")
	for _, line := range strings.Split(log, "\n") {
		if strings.Contains(line, "level=ERROR") {
			require.Contains(t, line, "escalation step may be recorded without delivery", "only lost commits are errors")
		}
	}
	t.Logf("escalation restart: %d steps delivered once, %d recorded without delivery (logged: %d)",
		len(counts), len(lost), lostLogged)
}

// A misconfigured engine fails at once instead of waiting: a login role without pgdrain_worker
// (permission denied, 42501) and a database that does not exist (3D000).
func TestEscalation_Run_MisconfigurationFailsAtOnce(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	quiet := escalation.Config{Logger: slog.New(slog.DiscardHandler)}

	// A member of pgdrain_producer only: connects, but may not call the alr functions.
	noGrant := loginPool(t, db, "pgdrain_producer")
	e, err := escalation.New(noGrant, map[string]escalation.Notifier{"test": &escCounter{n: map[string]int{}}}, quiet)
	require.NoError(t, err)
	err = e.Run(ctx)
	require.ErrorContains(t, err, "permission denied")
	require.ErrorContains(t, err, "listing channels in use")

	u, err := url.Parse(db.URL)
	require.NoError(t, err)
	u.Path = "/pgdrain_no_such_database"
	missing, err := pgxpool.New(ctx, u.String())
	require.NoError(t, err)
	defer missing.Close()
	e, err = escalation.New(missing, map[string]escalation.Notifier{"test": &escCounter{n: map[string]int{}}}, quiet)
	require.NoError(t, err)
	err = e.Run(ctx)
	require.ErrorContains(t, err, "pinging database")
	require.ErrorContains(t, err, "3D000")
	require.NoError(t, ctx.Err(), "Run returned at once, not after waiting")
}
