package gocheck

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/pgdrain/pgdrain/cmd/pgdrain/cli"
	"github.com/pgdrain/pgdrain/drainer"
	"github.com/pgdrain/pgdrain/internal/testdb"
	"github.com/pgdrain/pgdrain/relay"
)

// foLoginPool is a pool of a fresh login role that is a member of exactly pgdrain_worker and
// pgdrain_producer: what a relay that fans out needs.
func foLoginPool(t *testing.T, db *testdb.DB) *pgxpool.Pool {
	t.Helper()
	pool, err := pgxpool.New(context.Background(), foLoginURL(t, db))
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	return pool
}

// foLoginURL is the URL of a fresh login role that is a member of exactly pgdrain_worker and
// pgdrain_producer.
func foLoginURL(t *testing.T, db *testdb.DB) string {
	t.Helper()
	u := loginURL(t, db, "pgdrain_worker")
	pcfg, err := pgxpool.ParseConfig(u)
	require.NoError(t, err)
	_, err = db.Pool.Exec(context.Background(), fmt.Sprintf("GRANT pgdrain_producer TO %s",
		pgx.Identifier{pcfg.ConnConfig.User}.Sanitize()))
	require.NoError(t, err)
	return u
}

// foAddSink adds sink to q's fan-out as the owner.
func foAddSink(t *testing.T, q *drQueue, sink string, start relay.FanOutStart) int64 {
	t.Helper()
	n, err := relay.AddFanOutSink(context.Background(), q.pool, q.table, sink, start)
	require.NoError(t, err)
	return n
}

// foRoute is a fast route of sink's queue of q.
func foRoute(q *drQueue, name string, mode drainer.ClaimMode, sink relay.Sink) relay.Route {
	r := rlRoute(q, mode, sink, 4, 2)
	r.Queue = relay.FanOutQueue(q.table, name)
	r.SinkKind = name
	return r
}

// foCount counts the rows of table (sent only, when sent).
func foCount(t *testing.T, q *drQueue, table string, sent bool) int64 {
	t.Helper()
	where := ""
	if sent {
		where = " WHERE sent_at IS NOT NULL"
	}
	return q.count(t, "SELECT count(*) FROM "+pgx.Identifier(strings.Split(table, ".")).Sanitize()+where)
}

// foSourceIdentities maps every event of q's queue (key/seq) to its event_id.
func foSourceIdentities(t *testing.T, q *drQueue) map[string]string {
	t.Helper()
	rows, err := q.pool.Query(context.Background(),
		`SELECT payload->>'key' || '/' || (payload->>'seq'), event_id::text FROM public.events`)
	require.NoError(t, err)
	out := map[string]string{}
	var k, id string
	_, err = pgx.ForEachRow(rows, []any{&k, &id}, func() error {
		out[k] = id
		return nil
	})
	require.NoError(t, err)
	return out
}

// foRequireIdentities checks that every delivery of an event carries the source row's event_id.
func foRequireIdentities(t *testing.T, events []relay.Event, source map[string]string) {
	t.Helper()
	for _, e := range events {
		p := rlPayload(t, e)
		k := fmt.Sprintf("%s/%d", p.Key, p.Seq)
		require.Equal(t, source[k], e.Identity, "event %s: the sink's identity is the source row's event_id", k)
	}
}

// One queue, two sinks: sink a fails (transiently) for a while, sink b goes on meanwhile and gets
// every event; once a recovers it gets every event too. Each sink sees each key's events in commit
// order, nothing is lost, and a duplicate only ever comes under the event's one identity, the
// source row's event_id. Producers keep writing throughout; the relay runs as pgdrain_worker and
// pgdrain_producer, two replicas.
func TestRelayFanOut_AFailingSinkHoldsBackOnlyItself(t *testing.T) {
	t.Parallel()
	drEachMode(t, func(t *testing.T, mode drainer.ClaimMode) {
		q := drNewQueue(t, drQueueOpts{partitionColumn: "partition_key"})
		foAddSink(t, q, "a", relay.FromNow)
		foAddSink(t, q, "b", relay.FromNow)
		keys := []string{"k0", "k1", "k2", "k3", "k4", "k5"}
		want := map[string]int{}
		var wmu sync.Mutex
		produce := func(from, to int) {
			for seq := from; seq < to; seq++ {
				for _, k := range keys {
					q.enqueue(t, k, "op", seq)
					wmu.Lock()
					want[k] = seq + 1
					wmu.Unlock()
				}
			}
		}
		produce(0, 10)

		var down atomic.Bool
		down.Store(true)
		sinkA := &rlSink{decide: func(relay.Event) relay.Result {
			if down.Load() {
				return relay.TransientResult(errors.New("peer a is down"))
			}
			return relay.SentResult()
		}}
		sinkB := &rlSink{}
		pool := foLoginPool(t, q.db)
		routes := func() []relay.Route {
			return []relay.Route{foRoute(q, "a", mode, sinkA), foRoute(q, "b", mode, sinkB)}
		}
		fo := relay.WithFanOut(relay.FanOut{Queue: q.table, BatchSize: 16})
		start := func() func() error {
			r, err := relay.New(pool, routes(), relay.WithLogger(drLogger(t)), fo)
			require.NoError(t, err)
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- r.Run(ctx) }()
			stop := sync.OnceValue(func() error { cancel(); return <-done })
			t.Cleanup(func() { _ = stop() })
			return stop
		}
		stop1, stop2 := start(), start()

		var producers sync.WaitGroup
		producers.Go(func() { produce(10, 30) })
		producers.Wait()
		total := int64(len(keys) * 30)
		drWaitFor(t, 60*time.Second, "sink b has every event while a is down", func() bool {
			return foCount(t, q, "public.events__b", true) == total
		})
		require.Zero(t, foCount(t, q, "public.events__a", true), "sink a is down")
		require.Equal(t, total, foCount(t, q, "public.events__a", false), "sink a's events wait in its queue")
		require.Equal(t, total, q.sent(t), "the source is fanned out whatever a does")
		require.Zero(t, q.count(t, `SELECT count(*) FROM public.events__a WHERE attempt_count >= 10`), "a transient failure never poisons")

		down.Store(false)
		drWaitFor(t, 60*time.Second, "sink a catches up", func() bool {
			return foCount(t, q, "public.events__a", true) == total
		})
		require.NoError(t, stop1())
		require.NoError(t, stop2())

		source := foSourceIdentities(t, q)
		require.Len(t, source, int(total))
		for name, s := range map[string]*rlSink{"a": sinkA, "b": sinkB} {
			events, _ := s.snapshot()
			t.Logf("sink %s: %d deliveries of %d events", name, len(events), total)
			rlRequireKeyOrder(t, events, func(e relay.Event) drEvent { return rlPayload(t, e) }, want)
			foRequireIdentities(t, events, source)
			require.Equal(t, relay.FanOutQueue(q.table, name), events[0].Queue)
		}
	})
}

// A table named like a sink's queue that is not a registered queue stops the fan-out (a sink
// would otherwise miss events), and so does a queue without any sink queue: the events wait in
// the source, none is recorded as sent.
func TestRelayFanOut_WaitsRatherThanLoseEvents(t *testing.T) {
	t.Parallel()
	q := drNewQueue(t, drQueueOpts{partitionColumn: "partition_key"})
	q.enqueue(t, "k", "op", 0)
	pool := foLoginPool(t, q.db)
	r, err := relay.New(pool, nil, relay.WithLogger(drLogger(t)), relay.WithFanOut(relay.FanOut{Queue: q.table}))
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	time.Sleep(time.Second)
	require.Zero(t, q.sent(t), "no sink queue: nothing is fanned out")

	_, err = q.pool.Exec(context.Background(), `CREATE TABLE public.events__stray (id int)`)
	require.NoError(t, err)
	foAddSink(t, q, "a", relay.FromNow)
	time.Sleep(1500 * time.Millisecond)
	require.Zero(t, q.sent(t), "a table named like a sink's queue but not registered stops the fan-out")
	require.Zero(t, foCount(t, q, "public.events__a", false))

	_, err = q.pool.Exec(context.Background(), `DROP TABLE public.events__stray`)
	require.NoError(t, err)
	drWaitFor(t, 30*time.Second, "fanned out once the stray table is gone", func() bool { return q.sent(t) == 1 })
	require.EqualValues(t, 1, foCount(t, q, "public.events__a", false))
	cancel()
	require.NoError(t, <-done)
}

// foRequireSuffix checks that, per key, a sink got a suffix of the key's events: from its first one
// on, every next event in order (a redelivery of the same event aside), up to the last.
func foRequireSuffix(t *testing.T, events []relay.Event, want map[string]int) map[string]int {
	t.Helper()
	first := map[string]int{}
	last := map[string]int{}
	for _, e := range events {
		p := rlPayload(t, e)
		prev, started := last[p.Key]
		if !started {
			first[p.Key] = p.Seq
		} else {
			require.Contains(t, []int{prev, prev + 1}, p.Seq, "key %s: seq %d delivered after seq %d", p.Key, p.Seq, prev)
		}
		last[p.Key] = p.Seq
	}
	for key, n := range want {
		require.Equal(t, n-1, last[key], "key %s: the last event delivered", key)
	}
	return first
}

// A sink added while producers write and the fan-out runs: from now, it gets each key's events
// from some point on, every one after it in order (no hole); from the oldest, it gets every event,
// the retained sent ones first, each key in order. The replica still running with the old file
// (one sink) feeds the new sinks' queues too: the set of sinks is the database's.
func TestRelayFanOut_ASinkAddedLaterStartsFromNowOrFromTheOldest(t *testing.T) {
	t.Parallel()
	q := drNewQueue(t, drQueueOpts{partitionColumn: "partition_key"})
	foAddSink(t, q, "a", relay.FromNow)
	keys := []string{"k0", "k1", "k2", "k3", "k4", "k5"}
	const first, all = 10, 40
	for seq := range first {
		for _, k := range keys {
			q.enqueue(t, k, "op", seq)
		}
	}
	pool := foLoginPool(t, q.db)
	fo := relay.WithFanOut(relay.FanOut{Queue: q.table, BatchSize: 8})
	start := func(routes ...relay.Route) func() error {
		r, err := relay.New(pool, routes, relay.WithLogger(drLogger(t)), fo)
		require.NoError(t, err)
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- r.Run(ctx) }()
		stop := sync.OnceValue(func() error { cancel(); return <-done })
		t.Cleanup(func() { _ = stop() })
		return stop
	}
	sinkA, sinkB, sinkC := &rlSink{}, &rlSink{}, &rlSink{}
	stop1 := start(foRoute(q, "a", drainer.ClaimLease, sinkA))
	drWaitFor(t, 30*time.Second, "the first events reach sink a", func() bool {
		return foCount(t, q, "public.events__a", true) == int64(first*len(keys))
	})

	var producers sync.WaitGroup
	producers.Go(func() {
		for seq := first; seq < all; seq++ {
			for _, k := range keys {
				q.enqueue(t, k, "op", seq)
			}
			time.Sleep(time.Duration(rand.IntN(5)) * time.Millisecond)
		}
	})
	time.Sleep(50 * time.Millisecond)
	require.Zero(t, foAddSink(t, q, "b", relay.FromNow), "from now copies nothing")
	time.Sleep(50 * time.Millisecond)
	copied := foAddSink(t, q, "c", relay.FromOldest)
	require.GreaterOrEqual(t, copied, int64(first*len(keys)), "from the oldest copies at least the first events")
	stop2 := start(foRoute(q, "b", drainer.ClaimLock, sinkB), foRoute(q, "c", drainer.ClaimLease, sinkC))
	producers.Wait()

	total := int64(all * len(keys))
	for _, name := range []string{"a", "c"} {
		drWaitFor(t, 60*time.Second, "sink "+name+" has every event", func() bool {
			return foCount(t, q, relay.FanOutQueue(q.table, name), true) == total
		})
	}
	drWaitFor(t, 60*time.Second, "sink b has every event of its queue", func() bool {
		b := foCount(t, q, "public.events__b", false)
		return b > 0 && foCount(t, q, "public.events__b", true) == b
	})
	require.Equal(t, total, q.sent(t))
	require.NoError(t, stop1())
	require.NoError(t, stop2())

	want := map[string]int{}
	for _, k := range keys {
		want[k] = all
	}
	source := foSourceIdentities(t, q)
	for _, s := range []*rlSink{sinkA, sinkC} {
		events, _ := s.snapshot()
		rlRequireKeyOrder(t, events, func(e relay.Event) drEvent { return rlPayload(t, e) }, want)
		foRequireIdentities(t, events, source)
	}
	events, _ := sinkB.snapshot()
	firsts := foRequireSuffix(t, events, want)
	foRequireIdentities(t, events, source)
	for k, seq := range firsts {
		require.GreaterOrEqual(t, seq, first, "key %s: sink b, added from now, got an event fanned out before it was added", k)
	}
	t.Logf("sink c copied %d retained events; sink b started at %v", copied, firsts)
}

// pgdrain fanout add creates a sink's queue with its queue's registration: from now empty, from
// the oldest with every retained sent event (not the pending ones: the fan-out copies those), in
// id order, with their event_id, key, headers and created_at.
func TestCLI_FanOutAddCreatesASinksQueue(t *testing.T) {
	t.Parallel()
	db := cliFixture(t)
	cliExec(t, db.Pool, `SELECT outbox.create_queue('public.cli_events', 'account_id', max_attempts => 7)`)
	cliExec(t, db.Pool, `UPDATE public.cli_events SET sent_at = now(), headers = '{"x-n": "1"}' WHERE id <= 6`)

	r := runCLI(t, "--dsn", db.URL, "fanout", "add", "public.cli_events", "hooks")
	require.Equal(t, cli.ExitOK, r.code, r.stderr)
	require.Equal(t, "sink hooks of public.cli_events: queue public.cli_events__hooks created, from now\n", r.stdout)
	var out struct {
		SinkQueue string `json:"sink_queue"`
		From      string `json:"from"`
		Copied    int64  `json:"copied"`
	}
	runCLIJSON(t, cli.ExitOK, &out, "--dsn", db.URL, "fanout", "add", "public.cli_events", "audit", "--from", "oldest")
	require.Equal(t, "public.cli_events__audit", out.SinkQueue)
	require.Equal(t, "oldest", out.From)
	require.EqualValues(t, 6, out.Copied)

	var n int64
	require.NoError(t, db.Pool.QueryRow(context.Background(), `SELECT count(*) FROM public.cli_events__hooks`).Scan(&n))
	require.Zero(t, n)
	var same bool
	require.NoError(t, db.Pool.QueryRow(context.Background(), `
		SELECT array_agg(ROW(s.event_type, s.payload, s.account_id, s.event_id, s.headers, s.created_at) ORDER BY s.id)
		     = (SELECT array_agg(ROW(a.event_type, a.payload, a.account_id, a.event_id, a.headers, a.created_at) ORDER BY a.id)
		        FROM public.cli_events__audit a WHERE a.sent_at IS NULL AND a.attempt_count = 0)
		FROM public.cli_events s WHERE s.sent_at IS NOT NULL`).Scan(&same))
	require.True(t, same, "the retained sent events, in order, each as it was")
	var column string
	var maxAttempts int
	require.NoError(t, db.Pool.QueryRow(context.Background(),
		`SELECT partition_column, max_attempts FROM outbox.queues WHERE queue = 'public.cli_events__audit'`).Scan(&column, &maxAttempts))
	require.Equal(t, "account_id", column)
	require.Equal(t, 7, maxAttempts, "the sink's queue takes its queue's registration")

	r = runCLI(t, "--dsn", db.URL, "fanout", "add", "public.cli_events", "hooks")
	require.Equal(t, cli.ExitDatabase, r.code)
	require.Contains(t, r.stderr, "exists already")
	r = runCLI(t, "--dsn", db.URL, "fanout", "add", "public.cli_events", "Hooks")
	require.Equal(t, cli.ExitUsage, r.code)
	require.Contains(t, r.stderr, `SINK must be lower case letters and digits`)
	r = runCLI(t, "--dsn", db.URL, "fanout", "add", "public.nope", "hooks")
	require.Equal(t, cli.ExitUsage, r.code, "an unknown queue: %s", r.stderr)
	r = runCLI(t, "--dsn", db.URL, "fanout", "add", "public.cli_events", "x", "--from", "yesterday")
	require.Equal(t, cli.ExitUsage, r.code)
	require.Contains(t, r.stderr, `--from must be now or oldest, got "yesterday"`)
}

// The SQL docs/relay.md gives for adding a sink from the oldest event, run as written, makes the
// same sink queue as pgdrain fanout add --from oldest.
func TestRelayFanOut_TheDocumentedSQLAddsASinkLikeTheCommand(t *testing.T) {
	t.Parallel()
	doc, err := os.ReadFile("../docs/relay.md")
	require.NoError(t, err)
	_, rest, ok := strings.Cut(string(doc), "Without the command")
	require.True(t, ok, "docs/relay.md no longer gives the SQL of adding a sink")
	_, rest, ok = strings.Cut(rest, "```sql\n")
	require.True(t, ok)
	block, _, ok := strings.Cut(rest, "```")
	require.True(t, ok)
	var sql strings.Builder
	for line := range strings.Lines(block) {
		sql.WriteString(strings.TrimPrefix(line, "  "))
	}

	db := testdb.New(t)
	ctx := context.Background()
	_, err = db.Pool.Exec(ctx, `SELECT outbox.create_queue('public.orders', 'customer_id');
		INSERT INTO public.orders (event_type, payload, customer_id, headers)
		SELECT 'e', jsonb_build_object('n', g), 'c' || (g % 3), CASE WHEN g % 2 = 0 THEN '{"x-a": "b"}'::jsonb END
		FROM generate_series(1, 9) g;
		UPDATE public.orders SET sent_at = now() WHERE id <= 6`)
	require.NoError(t, err)
	_, err = db.Pool.Exec(ctx, sql.String())
	require.NoError(t, err, "the documented SQL:\n%s", sql.String())
	n, err := relay.AddFanOutSink(ctx, db.Pool, "public.orders", "hooks", relay.FromOldest)
	require.NoError(t, err)
	require.EqualValues(t, 6, n)
	var same bool
	require.NoError(t, db.Pool.QueryRow(ctx, `
		SELECT (SELECT array_agg(ROW(event_type, payload, customer_id, event_id, headers, created_at, sent_at, attempt_count) ORDER BY id)
		        FROM public.orders__kafka)
		     = (SELECT array_agg(ROW(event_type, payload, customer_id, event_id, headers, created_at, sent_at, attempt_count) ORDER BY id)
		        FROM public.orders__hooks)
		   AND (SELECT partition_column FROM outbox.queues WHERE queue = 'public.orders__kafka') = 'customer_id'`).Scan(&same))
	require.True(t, same)
}

// A sink whose queue was never made stops the relay at start (exit 3 in pgdrain relay), saying how
// to make it.
func TestRelayFanOut_AMissingSinkQueueSaysHowToMakeIt(t *testing.T) {
	t.Parallel()
	q := drNewQueue(t, drQueueOpts{partitionColumn: "partition_key"})
	pool := foLoginPool(t, q.db)
	r, err := relay.New(pool, []relay.Route{foRoute(q, "kafka", drainer.ClaimLease, &rlSink{})},
		relay.WithLogger(drLogger(t)), relay.WithFanOut(relay.FanOut{Queue: q.table}))
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err = r.Run(ctx)
	require.ErrorIs(t, err, drainer.ErrQueueNotRegistered)
	require.ErrorContains(t, err, "queue public.events__kafka: queue public.events__kafka is not registered")
	require.ErrorContains(t, err, "(it is the queue of sink kafka of public.events: create it with pgdrain fanout add public.events kafka)")
}

// An unpartitioned queue fans out to unpartitioned sink queues; a sink queue partitioned unlike its
// queue stops the copying (its events would lose or gain an order) until it is dropped.
func TestRelayFanOut_UnpartitionedQueuesAndAPartitioningMismatch(t *testing.T) {
	t.Parallel()
	q := drNewQueue(t, drQueueOpts{})
	foAddSink(t, q, "a", relay.FromNow)
	ctx := context.Background()
	_, err := q.pool.Exec(ctx, `SELECT outbox.create_queue('public.events__b', 'partition_key')`)
	require.NoError(t, err)
	for seq := range 20 {
		q.enqueue(t, "", "op", seq)
	}
	pool := foLoginPool(t, q.db)
	sink := &rlSink{}
	r, err := relay.New(pool, []relay.Route{foRoute(q, "a", drainer.ClaimLock, sink)},
		relay.WithLogger(drLogger(t)), relay.WithFanOut(relay.FanOut{Queue: q.table}))
	require.NoError(t, err)
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- r.Run(runCtx) }()
	time.Sleep(time.Second)
	require.Zero(t, q.sent(t), "a sink queue partitioned unlike its queue stops the copying")

	_, err = q.pool.Exec(ctx, `SELECT outbox.drop_queue('public.events__b', drop_table => true)`)
	require.NoError(t, err)
	drWaitFor(t, 30*time.Second, "every event delivered once the mismatched queue is gone", func() bool {
		return foCount(t, q, "public.events__a", true) == 20
	})
	cancel()
	require.NoError(t, <-done)
	events, _ := sink.snapshot()
	source := foSourceIdentities(t, q)
	seen := map[string]bool{}
	for _, e := range events {
		p := rlPayload(t, e)
		seen[fmt.Sprint(p.Seq)] = true
		require.Equal(t, "", e.PartitionKey)
		require.Equal(t, source[fmt.Sprintf("/%d", p.Seq)], e.Identity)
	}
	require.Len(t, seen, 20)
}

// fanout add --from oldest in a database whose default isolation is REPEATABLE READ: events a
// fan-out transaction marks sent while the add waits for the fan-out's lock are copied too (the
// add reads in READ COMMITTED after its wait). Before, its snapshot was taken by the lock's
// statement, before the wait, and such events reached neither the new sink's copy nor the fan-out
// (which did not know the new queue yet): lost for that sink.
func TestRelayFanOut_AddFromOldestCopiesWhatWasSentWhileItWaited(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	ctx := context.Background()
	exec(t, db.Pool, `ALTER DATABASE `+pgx.Identifier{db.Name}.Sanitize()+` SET default_transaction_isolation = 'repeatable read'`)
	exec(t, db.Pool, `SELECT outbox.create_queue('public.orders', 'customer_id');
		INSERT INTO public.orders (event_type, payload, customer_id) SELECT 'e', '{}', 'c' || g FROM generate_series(1, 6) g;
		UPDATE public.orders SET sent_at = now() WHERE id <= 3`)
	pool, err := pgxpool.New(ctx, db.URL) // new connections: the database's default applies
	require.NoError(t, err)
	defer pool.Close()

	// A fan-out transaction in flight: it holds the fan-out's lock shared, and marks rows sent.
	fanout, err := pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.ReadCommitted})
	require.NoError(t, err)
	defer func() { _ = fanout.Rollback(ctx) }()
	_, err = fanout.Exec(ctx, `SELECT pg_catalog.pg_advisory_xact_lock_shared(`+relay.FanOutLockKey("public.orders")+`)`)
	require.NoError(t, err)
	_, err = fanout.Exec(ctx, `UPDATE public.orders SET sent_at = now() WHERE id IN (4, 5)`)
	require.NoError(t, err)

	added := make(chan error, 1)
	var copied int64
	go func() {
		var err error
		copied, err = relay.AddFanOutSink(ctx, pool, "public.orders", "late", relay.FromOldest)
		added <- err
	}()
	require.Eventually(t, func() bool {
		var waiting bool
		require.NoError(t, db.Pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_stat_activity
			WHERE datname = current_database() AND wait_event_type = 'Lock' AND wait_event = 'advisory')`).Scan(&waiting))
		return waiting
	}, 10*time.Second, 20*time.Millisecond, "the add waits for the fan-out's lock")
	require.NoError(t, fanout.Commit(ctx))
	require.NoError(t, <-added)
	require.EqualValues(t, 5, copied, "the 3 sent before and the 2 sent while it waited")
	var n int
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT count(*) FROM public.orders__late`).Scan(&n))
	require.Equal(t, 5, n)
}

// An event one sink's queue refuses (a CHECK the DBA added there) failed the fan-out's whole copy,
// and the source rolled the batch back with no attempt counted: that event was first in every
// later batch, so no event of the queue reached any sink again. Now it holds back only its own key:
// the other keys' events reach both sinks, each once; the refused one is a failed attempt in the
// source queue with the refusal as its error, its key's next event waits behind it, and once the
// CHECK is gone both are copied.
func TestRelayFanOut_AnEventASinksQueueRefusesHoldsBackOnlyItsKey(t *testing.T) {
	t.Parallel()
	q := drNewQueue(t, drQueueOpts{partitionColumn: "partition_key"})
	foAddSink(t, q, "a", relay.FromNow)
	foAddSink(t, q, "b", relay.FromNow)
	_, err := q.pool.Exec(context.Background(),
		`ALTER TABLE public.events__a ADD CONSTRAINT no_bad_keys CHECK (partition_key IS DISTINCT FROM 'bad')`)
	require.NoError(t, err)
	bad := q.enqueue(t, "bad", "op", 0)
	badNext := q.enqueue(t, "bad", "op", 1)
	for seq := range 5 {
		for k := range 6 {
			q.enqueue(t, fmt.Sprintf("k%d", k), "op", seq)
		}
	}
	pool := foLoginPool(t, q.db)
	routes := []relay.Route{foRoute(q, "a", drainer.ClaimLease, &rlSink{}), foRoute(q, "b", drainer.ClaimLease, &rlSink{})}
	r, err := relay.New(pool, routes, relay.WithLogger(drLogger(t)), relay.WithFanOut(relay.FanOut{Queue: q.table, BatchSize: 16}))
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	stop := sync.OnceValue(func() error { cancel(); return <-done })
	t.Cleanup(func() { _ = stop() })

	drWaitFor(t, 30*time.Second, "the other keys' 30 events in both sinks, the refused one tried again", func() bool {
		return foCount(t, q, "public.events__a", false) == 30 && foCount(t, q, "public.events__b", false) == 30 &&
			q.count(t, `SELECT count(*) FROM public.events WHERE id = $1 AND attempt_count >= 2`, bad) == 1
	})
	var lastError string
	require.NoError(t, q.pool.QueryRow(context.Background(), `SELECT last_error FROM public.events WHERE id = $1`, bad).Scan(&lastError))
	require.Contains(t, lastError, "no_bad_keys", "the refusal is the source row's error")
	require.Zero(t, q.count(t, `SELECT count(*) FROM public.events WHERE id = $1 AND sent_at IS NOT NULL`, badNext), "its key waits")
	require.Zero(t, q.count(t, `SELECT count(*) FROM public.events__b WHERE partition_key = 'bad'`),
		"the refused event reached no sink: its copy is one step for every sink")

	_, err = q.pool.Exec(context.Background(), `ALTER TABLE public.events__a DROP CONSTRAINT no_bad_keys`)
	require.NoError(t, err)
	drWaitFor(t, 30*time.Second, "the bad key's two events copied once the CHECK is gone", func() bool {
		return q.sent(t) == 32
	})
	require.NoError(t, stop())
	for _, sink := range []string{"public.events__a", "public.events__b"} {
		require.Equal(t, int64(32), foCount(t, q, sink, false), "%s: every event copied once", sink)
		require.Equal(t, int64(32), q.count(t, `SELECT count(DISTINCT event_id) FROM `+sink), sink)
	}
}

// The fan-out waits while pgdrain fanout add (--from oldest, copying a long-retained queue) holds
// the fan-out's lock exclusively: the docs say so (FanOut, AddFanOutSink). A wait longer than
// Timeout ends with the call's context, which closes pgx's connection: not any row's failure, so no
// attempt may be counted for it (an unpartitioned queue poisons a row after max_attempts, and a
// poisoned row reaches no sink). Since the TxApplier's calls that run out of their time are the
// rows' failure, every such wait charged the rows, one at a time, and poisoned them. (Timeout 2s,
// ten of them in the wait: a call that is only slow, on a loaded machine, runs out of its time and
// is charged, as it should be; with 300ms a CI run's copy of one event did.)
func TestRelayFanOut_WaitingForAnAddChargesNoRow(t *testing.T) {
	t.Parallel()
	q := drNewQueue(t, drQueueOpts{maxAttempts: 2})
	foAddSink(t, q, "a", relay.FromNow)
	ctx := context.Background()
	for seq := range 5 {
		q.enqueue(t, "", "op", seq)
	}
	// The add in flight: the fan-out's lock held exclusively.
	add, err := q.pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = add.Rollback(ctx) }()
	_, err = add.Exec(ctx, `SELECT pg_catalog.pg_advisory_xact_lock(`+relay.FanOutLockKey(q.table)+`)`)
	require.NoError(t, err)

	pool := foLoginPool(t, q.db)
	r, err := relay.New(pool, nil, relay.WithLogger(drLogger(t)),
		relay.WithFanOut(relay.FanOut{Queue: q.table, Timeout: 2 * time.Second}))
	require.NoError(t, err)
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- r.Run(runCtx) }()
	time.Sleep(20 * time.Second)
	require.NoError(t, add.Commit(ctx))
	drWaitFor(t, 30*time.Second, "every event copied once the add committed", func() bool {
		return foCount(t, q, "public.events__a", false) == 5 || q.count(t, `SELECT count(*) FROM public.events WHERE attempt_count >= 2 AND sent_at IS NULL`) > 0
	})
	cancel()
	require.NoError(t, <-done)
	require.Zero(t, q.count(t, `SELECT count(*) FROM public.events WHERE attempt_count >= 2 AND sent_at IS NULL`), "no row poisoned by the wait")
	require.Zero(t, q.count(t, `SELECT count(*) FROM public.events WHERE attempt_count > 0`), "no row charged for the wait")
	require.EqualValues(t, 5, foCount(t, q, "public.events__a", false))
}
