package gocheck

import (
	"context"
	"fmt"
	"net/url"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/pgdrain/pgdrain/drainer"
)

// drListenQueues creates n queues public.q0..q<n-1> on one database and returns them (sharing
// the database's pool).
func drListenQueues(t *testing.T, n int) []*drQueue {
	t.Helper()
	first := drNewQueue(t, drQueueOpts{})
	qs := make([]*drQueue, n)
	for i := range n {
		q := &drQueue{db: first.db, pool: first.pool, table: fmt.Sprintf("public.q%d", i)}
		_, err := q.pool.Exec(context.Background(), `SELECT outbox.create_queue($1)`, q.table)
		require.NoError(t, err)
		qs[i] = q
	}
	return qs
}

func (q *drQueue) sentIn(t *testing.T) int64 {
	return q.count(t, `SELECT count(*) FROM `+q.table+` WHERE sent_at IS NOT NULL`)
}

func (q *drQueue) insert(t *testing.T) {
	t.Helper()
	_, err := q.pool.Exec(context.Background(), `SELECT outbox.enqueue($1, 'op', '{"key":"k","op":"op","seq":1}')`, q.table)
	require.NoError(t, err)
}

// drListeners returns the pids of the backends of role that are LISTENing (their last statement
// was a LISTEN or UNLISTEN of the shared listener).
func drListeners(t *testing.T, admin *pgxpool.Pool, role string) []int32 {
	t.Helper()
	rows, err := admin.Query(context.Background(), `
		SELECT pid FROM pg_stat_activity
		WHERE datname = current_database() AND usename = $1 AND query ~ '^(UN)?LISTEN ' ORDER BY pid`, role)
	require.NoError(t, err)
	pids, err := pgx.CollectRows(rows, pgx.RowTo[int32])
	require.NoError(t, err)
	return pids
}

// Four drainers of four queues on one pool share ONE LISTEN connection (one backend with a LISTEN
// statement in pg_stat_activity, the one ListenerPID names), and a NOTIFY on each queue still wakes
// its own drainer (PollFallback is a minute). Channels come and go with the drainers: a drainer
// started later is woken too, the connection stays while any drainer runs and closes with the
// last. Run as pgdrain_worker.
func TestDrainer_Listen_OneConnectionForAllDrainersOfAPool(t *testing.T) {
	t.Parallel()
	qs := drListenQueues(t, 5)
	worker := loginPool(t, qs[0].db, "pgdrain_worker")
	role := worker.Config().ConnConfig.User
	admin := qs[0].pool
	noop := func(context.Context, string, drEvent) error { return nil }

	stops := make([]func() error, 4)
	for i := range 4 {
		d, _ := drNew(t, worker, qs[i].config(drainer.ClaimLease), noop)
		stops[i] = drStart(t, d)
	}
	drWaitFor(t, 10*time.Second, "the shared LISTEN connection", func() bool { return drainer.ListenerPID(worker) != 0 })
	time.Sleep(300 * time.Millisecond) // every drainer has LISTENed and made its first (empty) claim
	pids := drListeners(t, admin, role)
	require.Equal(t, []int32{int32(drainer.ListenerPID(worker))}, pids, "one LISTEN connection for four drainers")

	for i := range 4 {
		qs[i].insert(t)
	}
	for i := range 4 {
		drWaitFor(t, 10*time.Second, fmt.Sprintf("queue %d woken by its NOTIFY", i), func() bool { return qs[i].sentIn(t) == 1 })
	}

	// A fifth drainer joins the same connection; two stop; the rest are still woken.
	d, _ := drNew(t, worker, qs[4].config(drainer.ClaimLock), noop)
	stop4 := drStart(t, d)
	time.Sleep(300 * time.Millisecond)
	require.NoError(t, stops[0]())
	require.NoError(t, stops[1]())
	for _, i := range []int{2, 3, 4} {
		qs[i].insert(t)
	}
	for i, want := range map[int]int64{2: 2, 3: 2, 4: 1} {
		drWaitFor(t, 10*time.Second, fmt.Sprintf("queue %d woken after others stopped", i), func() bool { return qs[i].sentIn(t) == want })
	}
	require.Equal(t, pids, drListeners(t, admin, role), "still the same single connection")

	require.NoError(t, stops[2]())
	require.NoError(t, stops[3]())
	require.NoError(t, stop4())
	require.Zero(t, drainer.ListenerPID(worker))
	drWaitFor(t, 5*time.Second, "the LISTEN connection closed with the last drainer", func() bool {
		return len(drListeners(t, admin, role)) == 0
	})
}

// The LISTEN connection is made like every connection of the pool: BeforeConnect (here: the one
// thing that supplies the login role, as an IAM token hook would) and AfterConnect (here: setting
// application_name) are honoured, and the hijacked connection does not count against MaxConns.
func TestDrainer_Listen_HonoursBeforeConnectAndAfterConnect(t *testing.T) {
	t.Parallel()
	q := drNewQueue(t, drQueueOpts{})
	login := loginPool(t, q.db, "pgdrain_worker")
	role := login.Config().ConnConfig.User

	u, err := url.Parse(q.db.URL)
	require.NoError(t, err)
	u.User = url.User("nobody_without_a_role") // only BeforeConnect makes this pool work
	cfg, err := pgxpool.ParseConfig(u.String())
	require.NoError(t, err)
	cfg.MaxConns = 2
	var before, after atomic.Int32
	cfg.BeforeConnect = func(_ context.Context, cc *pgx.ConnConfig) error {
		before.Add(1)
		cc.User = role
		return nil
	}
	cfg.AfterConnect = func(ctx context.Context, c *pgx.Conn) error {
		after.Add(1)
		_, err := c.Exec(ctx, `SELECT set_config('application_name', 'pgdrain-test-after-connect', false)`)
		return err
	}
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)

	var calls atomic.Int32
	d, _ := drNew(t, pool, q.config(drainer.ClaimLease), func(context.Context, string, drEvent) error {
		calls.Add(1)
		return nil
	})
	drStart(t, d)
	drWaitFor(t, 10*time.Second, "the LISTEN connection", func() bool { return drainer.ListenerPID(pool) != 0 })
	var app, user, query string
	require.NoError(t, q.pool.QueryRow(context.Background(),
		`SELECT application_name, usename, query FROM pg_stat_activity WHERE pid = $1`, int64(drainer.ListenerPID(pool))).
		Scan(&app, &user, &query))
	require.Equal(t, "pgdrain-test-after-connect", app, "AfterConnect ran on the LISTEN connection")
	require.Equal(t, role, user, "BeforeConnect chose the LISTEN connection's role")
	require.Regexp(t, `^LISTEN "pgdrain_public_events"`, query)
	require.GreaterOrEqual(t, before.Load(), int32(1))
	require.GreaterOrEqual(t, after.Load(), int32(1))

	time.Sleep(200 * time.Millisecond)
	q.enqueue(t, "k", "op", 1)
	drWaitFor(t, 10*time.Second, "the event applied on NOTIFY (PollFallback is 1m)", func() bool { return q.sent(t) == 1 })
	require.LessOrEqual(t, pool.Stat().TotalConns(), cfg.MaxConns, "the hijacked connection left the pool")
	var inDB int32
	require.NoError(t, q.pool.QueryRow(context.Background(), `SELECT count(*) FROM pg_stat_activity
		WHERE datname = current_database() AND application_name = 'pgdrain-test-after-connect'`).Scan(&inDB))
	require.LessOrEqual(t, inDB, cfg.MaxConns+1, "at most the pool's connections plus the LISTEN one")
}

// The shared LISTEN connection is killed (pg_terminate_backend): the listener reconnects through
// the pool with a new backend and wakes EVERY drainer, since NOTIFYs sent meanwhile are lost
// (rows committed during the outage are drained without waiting for PollFallback), and NOTIFY wakes
// them again afterwards. Run as pgdrain_worker.
func TestDrainer_Listen_ReconnectsAndWakesEveryDrainer(t *testing.T) {
	t.Parallel()
	qs := drListenQueues(t, 3)
	worker := loginPool(t, qs[0].db, "pgdrain_worker")
	admin := qs[0].pool
	for _, q := range qs {
		d, _ := drNew(t, worker, q.config(drainer.ClaimLease), func(context.Context, string, drEvent) error { return nil })
		drStart(t, d)
	}
	var first uint32
	drWaitFor(t, 10*time.Second, "the LISTEN connection", func() bool { first = drainer.ListenerPID(worker); return first != 0 })
	time.Sleep(300 * time.Millisecond)

	// Commit rows while the connection is gone (the listener waits 100 ms before reconnecting):
	// their NOTIFYs, sent at COMMIT, reach nobody.
	ctx := context.Background()
	tx, err := admin.Begin(ctx)
	require.NoError(t, err)
	for _, q := range qs {
		_, err := tx.Exec(ctx, `SELECT outbox.enqueue($1, 'op', '{"key":"k","op":"op","seq":1}')`, q.table)
		require.NoError(t, err)
	}
	var killed bool
	require.NoError(t, admin.QueryRow(ctx, `SELECT pg_terminate_backend($1)`, int64(first)).Scan(&killed))
	require.True(t, killed)
	require.NoError(t, tx.Commit(ctx))
	drWaitFor(t, 15*time.Second, "a new LISTEN connection", func() bool {
		pid := drainer.ListenerPID(worker)
		return pid != 0 && pid != first
	})
	for i, q := range qs {
		drWaitFor(t, 15*time.Second, fmt.Sprintf("queue %d drained after the reconnect (PollFallback is 1m)", i),
			func() bool { return q.sentIn(t) == 1 })
	}
	time.Sleep(200 * time.Millisecond)
	for _, q := range qs {
		q.insert(t)
	}
	for i, q := range qs {
		drWaitFor(t, 15*time.Second, fmt.Sprintf("queue %d woken by NOTIFY after the reconnect", i),
			func() bool { return q.sentIn(t) == 2 })
	}
}

// create_queue may give a running queue another NOTIFY channel: the drainer follows it at its next
// repair pass (it heard nothing until PollFallback before, 28.5 s in the report).
func TestDrainer_Listen_FollowsAChannelChangedWhileItRuns(t *testing.T) {
	t.Parallel()
	q := drNewQueue(t, drQueueOpts{})
	cfg := q.config(drainer.ClaimLease) // PollFallback: a minute
	cfg.RepairInterval, cfg.BusyPoll, cfg.TrickleInterval = 200*time.Millisecond, -1, -1
	d, _ := drNew(t, q.pool, cfg, func(context.Context, string, drEvent) error { return nil })
	stop := drStart(t, d)
	q.insert(t)
	drWaitFor(t, 10*time.Second, "a row delivered on the first channel", func() bool { return q.sentIn(t) == 1 })
	_, err := q.pool.Exec(context.Background(), `SELECT outbox.create_queue($1, channel => 'pgdrain_moved')`, q.table)
	require.NoError(t, err)
	time.Sleep(time.Second) // a few repair passes
	q.insert(t)
	drWaitFor(t, 5*time.Second, "a row delivered on the new channel, long before PollFallback", func() bool { return q.sentIn(t) == 2 })
	require.NoError(t, stop())
}

// A role (or a database) with standard_conforming_strings off, a legacy setting: the LISTEN
// connection still comes up, and a NOTIFY wakes the drainer at once. pgx refuses every
// simple-protocol statement on such a session, so the LISTEN connection reconnected for ever and a
// new event waited for PollFallback (25 s in a DBA's review). Run as pgdrain_worker.
func TestDrainer_Listen_WorksWithStandardConformingStringsOff(t *testing.T) {
	t.Parallel()
	q := drNewQueue(t, drQueueOpts{})
	login := loginPool(t, q.db, "pgdrain_worker")
	exec(t, q.pool, `ALTER ROLE `+pgx.Identifier{login.Config().ConnConfig.User}.Sanitize()+` SET standard_conforming_strings = off`)
	worker, err := pgxpool.New(context.Background(), login.Config().ConnString())
	require.NoError(t, err)
	t.Cleanup(worker.Close)

	cfg := q.config(drainer.ClaimLease)
	cfg.PollFallback = time.Minute
	var applied atomic.Int32
	d, _ := drNew(t, worker, cfg, func(context.Context, string, drEvent) error {
		applied.Add(1)
		return nil
	})
	stop := drStart(t, d)
	drWaitFor(t, 10*time.Second, "the LISTEN connection", func() bool { return drainer.ListenerPID(worker) != 0 })
	q.enqueue(t, "k", "op", 1)
	drWaitFor(t, 5*time.Second, "the event delivered on its NOTIFY", func() bool { return applied.Load() == 1 })
	require.NoError(t, stop())
}

// A role with idle_session_timeout (a DBA's guard against forgotten sessions) does not end the
// LISTEN connection, which is idle by design: it used to be ended every second here, each time a
// reconnection logged at Warn. Run as pgdrain_worker.
func TestDrainer_Listen_OutlivesARolesIdleSessionTimeout(t *testing.T) {
	t.Parallel()
	q := drNewQueue(t, drQueueOpts{})
	login := loginPool(t, q.db, "pgdrain_worker")
	exec(t, q.pool, `ALTER ROLE `+pgx.Identifier{login.Config().ConnConfig.User}.Sanitize()+` SET idle_session_timeout = '500ms'`)
	worker, err := pgxpool.New(context.Background(), login.Config().ConnString())
	require.NoError(t, err)
	t.Cleanup(worker.Close)

	cfg := q.config(drainer.ClaimLease)
	cfg.PollFallback = time.Minute
	logger, buf := drCapture(t)
	d, _ := drNew(t, worker, cfg, func(context.Context, string, drEvent) error { return nil },
		drainer.WithLogger[drEvent](logger))
	stop := drStart(t, d)
	drWaitFor(t, 10*time.Second, "the LISTEN connection", func() bool { return drainer.ListenerPID(worker) != 0 })
	pid := drainer.ListenerPID(worker)
	time.Sleep(2 * time.Second)
	require.Equal(t, pid, drainer.ListenerPID(worker), "the same LISTEN connection")
	require.NoError(t, stop())
	require.NotContains(t, buf.String(), "LISTEN connection lost")
}
