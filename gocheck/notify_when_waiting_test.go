package gocheck

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/pgdrain/pgdrain/drainer"
	"github.com/pgdrain/pgdrain/internal/testdb"
)

// heard counts the notifications on listener that arrive within 300 ms.
func heard(t *testing.T, listener *pgx.Conn) int {
	t.Helper()
	n := 0
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		_, err := listener.WaitForNotification(ctx)
		cancel()
		if err != nil {
			return n
		}
		n++
	}
}

// drainerWaits calls outbox.drainer_waits as the given pool's role and returns the mark (nil: the
// notify gate was held).
func drainerWaits(t *testing.T, pool *pgxpool.Pool, queue string) *int64 {
	t.Helper()
	var mark *int64
	require.NoError(t, pool.QueryRow(context.Background(),
		`SELECT outbox.drainer_waits($1, interval '1 minute')`, queue).Scan(&mark))
	return mark
}

// A queue that notifies 'when_waiting' sends a NOTIFY only between a drainer's drainer_waits and
// the drainer_woke after the NOTIFY that woke it: an unpartitioned queue on every insert then, a
// partitioned one when a commit made a partition claimable. Producers run as pgdrain_producer,
// the drainer's calls as pgdrain_worker.
func TestNotify_WhenWaiting_OnlyWhileADrainerWaits(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	ctx := context.Background()
	exec(t, db.Pool, `SELECT outbox.create_queue('public.parted', 'resource_id', channel => 'parted_wake');
		SELECT outbox.create_queue('public.flat', channel => 'flat_wake');
		SELECT outbox.set_notify('public.parted', 'when_waiting');
		SELECT outbox.set_notify('public.flat', 'when_waiting')`)
	producer := loginPool(t, db, "pgdrain_producer")
	worker := loginPool(t, db, "pgdrain_worker")
	listener, err := pgx.Connect(ctx, db.URL)
	require.NoError(t, err)
	defer listener.Close(ctx)
	_, err = listener.Exec(ctx, "LISTEN parted_wake; LISTEN flat_wake")
	require.NoError(t, err)

	for i, c := range []struct{ queue, insert string }{
		{"public.flat", `INSERT INTO public.flat (event_type, payload) VALUES ('e', '{}')`},
		{"public.parted", `INSERT INTO public.parted (event_type, payload, resource_id) VALUES ('e', '{}', 'new-' || $1::int)`},
	} {
		insert := func(n int) {
			t.Helper()
			args := []any{}
			if c.queue == "public.parted" {
				args = append(args, i*100+n)
			}
			_, err := producer.Exec(ctx, c.insert, args...)
			require.NoError(t, err)
		}
		insert(1)
		require.Zero(t, heard(t, listener), "%s: no drainer waits: no NOTIFY", c.queue)
		mark := drainerWaits(t, worker, c.queue)
		require.NotNil(t, mark)
		require.Positive(t, *mark)
		insert(2)
		insert(3)
		require.Equal(t, 2, heard(t, listener), "%s: a drainer waits: each commit notifies", c.queue)
		exec(t, worker, `SELECT outbox.drainer_woke($1, $2)`, c.queue, *mark)
		insert(4)
		require.Zero(t, heard(t, listener), "%s: the drainer woke: no NOTIFY", c.queue)

		// Marks only grow: the first drainer's drainer_woke leaves the second one's mark alone.
		first := drainerWaits(t, worker, c.queue)
		second := drainerWaits(t, worker, c.queue)
		require.Greater(t, *second, *first)
		exec(t, worker, `SELECT outbox.drainer_woke($1, $2)`, c.queue, *first)
		insert(5)
		require.Equal(t, 1, heard(t, listener), "%s: the second drainer still waits", c.queue)
		exec(t, worker, `SELECT outbox.drainer_woke($1, $2)`, c.queue, *second)
	}

	// 'always' again: every insert notifies, and drainer_waits has nothing to mark.
	exec(t, db.Pool, `SELECT outbox.set_notify('public.flat', 'always')`)
	_, err = producer.Exec(ctx, `INSERT INTO public.flat (event_type, payload) VALUES ('e', '{}')`)
	require.NoError(t, err)
	require.Equal(t, 1, heard(t, listener))
	require.Equal(t, int64(0), *drainerWaits(t, worker, "public.flat"))
}

// A drainer can not mark itself waiting while a producer is between its check for a mark and its
// commit (it would miss that producer's rows: no NOTIFY, and its claim before waiting does not see
// them yet). drainer_waits then answers NULL at once, without waiting for the producer, and marks
// once the producer committed. Neither waits for the other.
func TestNotify_WhenWaiting_NoMarkWhileAProducerCommits(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	ctx := context.Background()
	exec(t, db.Pool, `SELECT outbox.create_queue('public.flat');
		SELECT outbox.create_queue('public.parted', 'resource_id');
		SELECT outbox.set_notify('public.flat', 'when_waiting');
		SELECT outbox.set_notify('public.parted', 'when_waiting')`)
	producer := loginPool(t, db, "pgdrain_producer")
	worker := loginPool(t, db, "pgdrain_worker")

	tx, err := producer.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	_, err = tx.Exec(ctx, `INSERT INTO public.flat (event_type, payload) VALUES ('e', '{}')`)
	require.NoError(t, err)
	start := time.Now()
	require.Nil(t, drainerWaits(t, worker, "public.flat"), "an unpartitioned producer holds the gate from its insert")
	require.Less(t, time.Since(start), 5*time.Second, "drainer_waits does not wait")
	require.NotNil(t, drainerWaits(t, worker, "public.parted"), "another queue's gate is free")
	require.NoError(t, tx.Commit(ctx))
	require.NotNil(t, drainerWaits(t, worker, "public.flat"))

	// A partitioned queue's producer checks at COMMIT: its gate is free until then.
	tx, err = producer.Begin(ctx)
	require.NoError(t, err)
	_, err = tx.Exec(ctx, `INSERT INTO public.parted (event_type, payload, resource_id) VALUES ('e', '{}', 'k')`)
	require.NoError(t, err)
	require.NotNil(t, drainerWaits(t, worker, "public.parted"))
	_, err = tx.Exec(ctx, `SET CONSTRAINTS outbox.pgdrain_commit IMMEDIATE`)
	require.NoError(t, err)
	require.Nil(t, drainerWaits(t, worker, "public.parted"), "the commit step ran: the gate is held until COMMIT")
	require.NoError(t, tx.Commit(ctx))
}

// A drainer that a NOTIFY woke clears its mark even while producers hold the notify gate shared
// (producers that commit back to back hold it nearly all the time): before, drainer_woke needed the
// gate, so under load the mark stayed until it ran out (PollFallback + 1 s) and every producer
// meanwhile notified, each commit queued on NOTIFY's lock (issue 29: producers beside one lease
// drainer at a quarter of their rate).
func TestNotify_WhenWaiting_WokeClearsWhileProducersCommit(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	ctx := context.Background()
	exec(t, db.Pool, `SELECT outbox.create_queue('public.flat', channel => 'flat_wake');
		SELECT outbox.set_notify('public.flat', 'when_waiting')`)
	producer := loginPool(t, db, "pgdrain_producer")
	worker := loginPool(t, db, "pgdrain_worker")
	listener, err := pgx.Connect(ctx, db.URL)
	require.NoError(t, err)
	defer listener.Close(ctx)
	_, err = listener.Exec(ctx, "LISTEN flat_wake")
	require.NoError(t, err)
	const insert = `INSERT INTO public.flat (event_type, payload) VALUES ('e', '{}')`

	mark := drainerWaits(t, worker, "public.flat")
	require.NotNil(t, mark)
	// A producer between its check (it saw the mark: it will notify) and its commit holds the gate.
	tx, err := producer.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	_, err = tx.Exec(ctx, insert)
	require.NoError(t, err)
	start := time.Now()
	exec(t, worker, `SELECT outbox.drainer_woke($1, $2)`, "public.flat", *mark)
	require.Less(t, time.Since(start), 5*time.Second, "drainer_woke does not wait for the producer")
	require.NoError(t, tx.Commit(ctx))
	require.Equal(t, 1, heard(t, listener), "the producer that saw the mark notifies")
	_, err = producer.Exec(ctx, insert)
	require.NoError(t, err)
	require.Zero(t, heard(t, listener), "the mark is cleared: the next producer does not notify")

	// A drainer that marked meanwhile keeps its mark, with or without the gate held.
	first := drainerWaits(t, worker, "public.flat")
	second := drainerWaits(t, worker, "public.flat")
	require.Greater(t, *second, *first)
	tx, err = producer.Begin(ctx)
	require.NoError(t, err)
	_, err = tx.Exec(ctx, insert)
	require.NoError(t, err)
	exec(t, worker, `SELECT outbox.drainer_woke($1, $2)`, "public.flat", *first)
	require.NoError(t, tx.Commit(ctx))
	_, err = producer.Exec(ctx, insert)
	require.NoError(t, err)
	require.Equal(t, 2, heard(t, listener), "the second drainer still waits: both commits notify")
}

// The Go drainer of a queue that notifies 'when_waiting' marks itself waiting before it sleeps and
// clears the mark when a NOTIFY wakes it: rows inserted while it sleeps are delivered at once
// (PollFallback is a minute), and it marks itself again before the next sleep. Both claim modes,
// both queue kinds, as pgdrain_worker.
func TestDrainer_WhenWaiting_WakesForEveryRow(t *testing.T) {
	for _, partitioned := range []bool{false, true} {
		name := "unpartitioned"
		if partitioned {
			name = "partitioned"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			drEachMode(t, func(t *testing.T, mode drainer.ClaimMode) {
				opts := drQueueOpts{}
				if partitioned {
					opts.partitionColumn = "resource_id"
				}
				q := drNewQueue(t, opts)
				exec(t, q.pool, `SELECT outbox.set_notify($1, 'when_waiting')`, q.table)
				worker := loginPool(t, q.db, "pgdrain_worker")
				d, _ := drNew(t, worker, q.config(mode), func(context.Context, string, drEvent) error { return nil })
				drStart(t, d)
				var sequence string
				require.NoError(t, q.pool.QueryRow(context.Background(),
					`SELECT 'outbox.drainer_waits_q' || queue_id FROM outbox.queues WHERE queue = $1`, q.table).Scan(&sequence))
				waiting := func() bool {
					return q.count(t, `SELECT (last_value > (extract(epoch FROM clock_timestamp()) * 1000)::bigint)::int
						FROM `+sequence) == 1
				}
				drWaitFor(t, 10*time.Second, "the drainer marks itself waiting", waiting)
				for i := 1; i <= 5; i++ {
					q.enqueue(t, "k"+string(rune('a'+i)), "op", i)
					drWaitFor(t, 10*time.Second, "the row is delivered without the poll", func() bool { return q.sent(t) == int64(i) })
					drWaitFor(t, 10*time.Second, "the drainer waits again", waiting)
				}
			})
		})
	}
}

// A queue created since 00024 notifies only while a drainer waits (issue 29: 'always' cost eight
// single-row producers of an unpartitioned queue half their rate); a queue registered before keeps
// its setting when create_queue runs again, and set_notify still chooses 'always'.
func TestNotify_NewQueuesNotifyWhenWaiting(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	exec(t, db.Pool, `SELECT outbox.create_queue('public.fresh');
		SELECT outbox.create_queue('public.kept', 'resource_id');
		SELECT outbox.set_notify('public.kept', 'always');
		SELECT outbox.create_queue('public.kept', 'resource_id', max_attempts => 5)`)
	var fresh, kept string
	require.NoError(t, db.Pool.QueryRow(context.Background(), `SELECT
		(SELECT notify FROM outbox.queues WHERE queue = 'public.fresh'),
		(SELECT notify FROM outbox.queues WHERE queue = 'public.kept')`).Scan(&fresh, &kept))
	require.Equal(t, "when_waiting", fresh, "a new queue notifies only while a drainer waits")
	require.Equal(t, "always", kept, "a queue's choice survives create_queue")
	require.Equal(t, []int{0}, notifications(t, db, "pgdrain_public_fresh",
		`INSERT INTO public.fresh (event_type, payload) VALUES ('e', '{}')`),
		"no drainer waits: no NOTIFY")
}

// A drainer whose mark is still up when it becomes busy (it marked itself, then woke for a row that
// became due, and every claim since finds rows) clears the mark at the first NOTIFY it hears, in
// both claim modes: producers then stop notifying (each NOTIFY queues the producer's commit on
// NOTIFY's lock). A lock-mode drainer cleared it only once a batch found nothing, and three
// lock-mode drainers beside producers at 400 commits/s had every second commit notify (issue 29).
func TestDrainer_WhenWaiting_ABusyDrainerClearsItsMark(t *testing.T) {
	drEachMode(t, func(t *testing.T, mode drainer.ClaimMode) {
		ctx := context.Background()
		q := drNewQueue(t, drQueueOpts{})
		exec(t, q.pool, `SELECT outbox.set_notify($1, 'when_waiting')`, q.table)
		var channel, sequence string
		require.NoError(t, q.pool.QueryRow(ctx, `SELECT channel, 'outbox.drainer_waits_q' || queue_id
			FROM outbox.queues WHERE queue = $1`, q.table).Scan(&channel, &sequence))
		listener, err := pgx.Connect(ctx, q.db.URL)
		require.NoError(t, err)
		defer listener.Close(ctx)
		_, err = listener.Exec(ctx, "LISTEN "+pgx.Identifier{channel}.Sanitize())
		require.NoError(t, err)

		cfg := q.config(mode)
		cfg.BatchSize, cfg.ApplyConcurrency = 1, 1
		cfg.TrickleInterval, cfg.BusyPoll = -1, -1
		busy := make(chan struct{}, 1)
		d, _ := drNew(t, q.pool, cfg, func(context.Context, string, drEvent) error {
			select {
			case busy <- struct{}{}:
			default:
			}
			time.Sleep(30 * time.Millisecond)
			return nil
		})
		drStart(t, d)
		waiting := func() bool {
			return q.count(t, `SELECT (last_value > (extract(epoch FROM clock_timestamp()) * 1000)::bigint)::int FROM `+sequence) == 1
		}
		drWaitFor(t, 10*time.Second, "the idle drainer marks itself waiting", waiting)
		// A row due in 2 s: its insert notifies and wakes the drainer, which marks itself again for
		// the wait until it is due, then wakes by its timer with the mark up and claims it.
		exec(t, q.pool, `SELECT outbox.enqueue($1, 'op', '{"key": "k", "op": "op", "seq": 0}', NULL,
			clock_timestamp() + interval '2 seconds')`, q.table)
		heard(t, listener)
		select {
		case <-busy:
		case <-time.After(10 * time.Second):
			t.Fatal("the due row was not delivered")
		}
		require.True(t, waiting(), "the mark is still up when the drainer becomes busy")

		// Rows faster than it applies them (every 20 ms, 30 ms each): every claim finds rows.
		for i := 1; i <= 30; i++ {
			q.enqueue(t, "", "op", i)
			time.Sleep(20 * time.Millisecond)
		}
		notified := heard(t, listener)
		// Before, all 30 (the mark outlived them); the first few notify until the batch in progress
		// ends (3 to 6 here), more on a loaded machine.
		require.LessOrEqual(t, notified, 15, "30 commits while the drainer was busy: only the first ones notify")
		drWaitFor(t, 10*time.Second, "every row is delivered", func() bool { return q.sent(t) == 31 })
	})
}
