package gocheck

import (
	"context"
	"fmt"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/pgdrain/pgdrain/drainer"
)

// pgbSetup is one PgBouncer check: a queue, a worker and a producer login role, and a PgBouncer
// in transaction pooling mode in front of the test server that knows both roles.
type pgbSetup struct {
	q                   *drQueue
	b                   *pgBouncer
	workerURL, prodURL  string // direct to PostgreSQL
	workerRole, prodRol string
}

func newPgbSetup(t *testing.T, partition string, poolSize int) *pgbSetup {
	t.Helper()
	s := &pgbSetup{q: drNewQueue(t, drQueueOpts{partitionColumn: partition})}
	s.workerURL = loginURL(t, s.q.db, "pgdrain_worker")
	s.prodURL = loginURL(t, s.q.db, "pgdrain_producer")
	s.workerRole, s.prodRol = urlUser(t, s.workerURL), urlUser(t, s.prodURL)
	s.b = startPgBouncer(t, s.q.db.URL, poolSize, s.workerRole, s.prodRol)
	return s
}

func urlUser(t *testing.T, raw string) string {
	t.Helper()
	u, err := url.Parse(raw)
	require.NoError(t, err)
	return u.User.Username()
}

// pool opens a pool to direct's role and database through PgBouncer, with pgx's
// default_query_exec_mode set to mode ("" keeps pgx's default, cache_statement).
func (s *pgbSetup) pool(t *testing.T, direct, mode string, maxConns int) *pgxpool.Pool {
	t.Helper()
	extra := url.Values{"pool_max_conns": {fmt.Sprint(maxConns)}}
	if mode != "" {
		extra.Set("default_query_exec_mode", mode)
	}
	return pgbOpen(t, s.b.url(t, direct, extra))
}

// withQuery returns raw with its query parameter key set to value (raw may have no query yet).
func withQuery(t *testing.T, raw, key, value string) string {
	t.Helper()
	u, err := url.Parse(raw)
	require.NoError(t, err)
	q := u.Query()
	q.Set(key, value)
	u.RawQuery = q.Encode()
	return u.String()
}

func pgbOpen(t *testing.T, dsn string) *pgxpool.Pool {
	t.Helper()
	pool, err := pgxpool.New(context.Background(), dsn)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	return pool
}

// serverConns returns how many server connections role has open on the test database.
func (s *pgbSetup) serverConns(t *testing.T, role string) int {
	t.Helper()
	return int(s.q.count(t, `SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND usename = $1`, role))
}

// produce runs producers as pgdrain_producer through PgBouncer: each owns keys (so a key's seq
// order is its id order) and commits transactions of one row per key, alternately a plain
// INSERT of the event's columns and outbox.enqueue. It returns the number of rows once all are
// committed.
func (s *pgbSetup) produce(t *testing.T, pool *pgxpool.Pool, producers, keysEach, perKey int) int {
	t.Helper()
	partitioned := s.q.count(t, `SELECT count(*) FROM outbox.queues WHERE queue = $1 AND partition_column IS NOT NULL`, s.q.table) == 1
	var wg sync.WaitGroup
	errs := make(chan error, producers)
	for p := range producers {
		wg.Go(func() {
			ctx := context.Background()
			for seq := range perKey {
				err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
					for k := range keysEach {
						key := fmt.Sprintf("p%dk%d", p, k)
						payload := fmt.Sprintf(`{"key":%q,"op":"op","seq":%d}`, key, seq)
						var partition *string
						if partitioned {
							partition = &key
						}
						var err error
						if (seq+k)%2 == 0 {
							cols, vals := "event_type, payload", "$1, $2::jsonb"
							args := []any{"op", payload}
							if partitioned {
								cols, vals, args = cols+", resource_id", vals+", $3", append(args, key)
							}
							_, err = tx.Exec(ctx, `INSERT INTO public.events (`+cols+`) VALUES (`+vals+`)`, args...)
						} else {
							_, err = tx.Exec(ctx, `SELECT outbox.enqueue('public.events', 'op', $1::jsonb, $2)`, payload, partition)
						}
						if err != nil {
							return err
						}
					}
					return nil
				})
				if err != nil {
					errs <- fmt.Errorf("producer %d seq %d: %w", p, seq, err)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	return producers * keysEach * perKey
}

// checkDelivered fails unless every (key, seq) of the producers was applied, and, on a
// partitioned queue, each key's applies came in seq order (a row delivered again repeats its own
// seq, never an earlier one's).
func checkDelivered(t *testing.T, entries []drEvent, producers, keysEach, perKey int, partitioned bool) {
	t.Helper()
	seen := map[string]bool{}
	last := map[string]int{}
	for _, e := range entries {
		seen[fmt.Sprintf("%s/%d", e.Key, e.Seq)] = true
		if !partitioned {
			continue
		}
		prev, ok := last[e.Key]
		require.True(t, (!ok && e.Seq == 0) || (ok && (e.Seq == prev+1 || e.Seq == prev)),
			"key %s: seq %d applied after %d", e.Key, e.Seq, prev)
		last[e.Key] = e.Seq
	}
	for p := range producers {
		for k := range keysEach {
			for seq := range perKey {
				require.True(t, seen[fmt.Sprintf("p%dk%d/%d", p, k, seq)], "p%dk%d seq %d was never applied", p, k, seq)
			}
		}
	}
}

// Producers (plain INSERT and outbox.enqueue, as pgdrain_producer) and three drainers (as
// pgdrain_worker, each its own pgx pool, as on three replicas) in both claim modes drain a
// partitioned and an unpartitioned queue through a PgBouncer in transaction pooling mode whose
// pool holds at most 2 server connections per role, so the drainers' statements (and, in lock
// mode, their claim transactions) take turns on shared server connections, inheriting each
// other's session state (the claim cursor). With default_query_exec_mode=exec and LISTEN over a
// direct pool (drainer.WithListenPool; PollFallback is a minute), every row is applied, each key
// in order, and no drainer logs an error.
func TestPgBouncer_TransactionPooling_DrainsEveryShapeInBothModes(t *testing.T) {
	t.Parallel()
	for _, shape := range drShapes {
		t.Run(shape.name, func(t *testing.T) {
			t.Parallel()
			drEachMode(t, func(t *testing.T, mode drainer.ClaimMode) {
				const poolSize, producers, keysEach, perKey = 2, 3, 4, 20
				s := newPgbSetup(t, shape.partition, poolSize)
				listen := pgbOpen(t, withQuery(t, s.workerURL, "pool_max_conns", "1"))
				var applied drLog
				logger, buf := drCapture(t)
				cfg := s.q.config(mode)
				cfg.BatchSize = 8
				cfg.RepairInterval = 300 * time.Millisecond
				for range 3 {
					d, _ := drNew(t, s.pool(t, s.workerURL, "exec", 4), cfg, func(ctx context.Context, _ string, e drEvent) error {
						applied.add(ctx, e)
						return nil
					}, drainer.WithLogger[drEvent](logger), drainer.WithListenPool[drEvent](listen))
					drStart(t, d)
				}
				drWaitFor(t, 10*time.Second, "the shared LISTEN connection", func() bool { return drainer.ListenerPID(listen) != 0 })

				// Watch the server connections while producers and drainers run: PgBouncer
				// keeps the worker's at poolSize, plus the direct LISTEN connection.
				var most atomic.Int64
				watchCtx, stopWatch := context.WithCancel(context.Background())
				var watch sync.WaitGroup
				watch.Go(func() {
					for watchCtx.Err() == nil {
						most.Store(max(most.Load(), int64(s.serverConns(t, s.workerRole))))
						time.Sleep(20 * time.Millisecond)
					}
				})
				total := s.produce(t, s.pool(t, s.prodURL, "exec", 4), producers, keysEach, perKey)
				drWaitFor(t, 60*time.Second, "every row sent", func() bool { return s.q.sent(t) == int64(total) })
				stopWatch()
				watch.Wait()

				entries, _ := applied.snapshot()
				checkDelivered(t, entries, producers, keysEach, perKey, shape.partition != "")
				require.LessOrEqual(t, most.Load(), int64(poolSize+1), "server connections of the worker role")
				require.Zero(t, s.q.count(t, `SELECT count(*) FROM public.events WHERE sent_at IS NULL`))
				log := buf.String()
				require.NotContains(t, log, "level=ERROR")
				require.NotContains(t, log, "level=WARN")
			})
		})
	}
}

// A drainer with Config.PollOnly runs through PgBouncer without any LISTEN connection (nothing
// LISTENs, ListenerPID is 0) and still drains rows that arrive after it started, on its
// PollFallback.
func TestPgBouncer_PollOnlyDrainsWithoutListen(t *testing.T) {
	t.Parallel()
	drEachMode(t, func(t *testing.T, mode drainer.ClaimMode) {
		s := newPgbSetup(t, "resource_id", 2)
		pool := s.pool(t, s.workerURL, "exec", 2)
		var applied drLog
		logger, buf := drCapture(t)
		cfg := s.q.config(mode)
		cfg.PollOnly = true
		cfg.PollFallback = 200 * time.Millisecond
		d, _ := drNew(t, pool, cfg, func(ctx context.Context, _ string, e drEvent) error {
			applied.add(ctx, e)
			return nil
		}, drainer.WithLogger[drEvent](logger))
		drStart(t, d)
		time.Sleep(300 * time.Millisecond) // the drainer is idle: only its poll can find the rows
		total := s.produce(t, s.pool(t, s.prodURL, "exec", 2), 2, 2, 5)
		drWaitFor(t, 20*time.Second, "every row sent", func() bool { return s.q.sent(t) == int64(total) })
		entries, _ := applied.snapshot()
		checkDelivered(t, entries, 2, 2, 5, true)
		require.Zero(t, drainer.ListenerPID(pool))
		require.Empty(t, drListeners(t, s.q.pool, s.workerRole))
		require.NotContains(t, buf.String(), "level=ERROR")
		require.NotContains(t, buf.String(), "LISTEN")
	})
}

// What breaks without the settings docs/pgbouncer.md asks for: with pgx's default statement cache
// two drainers on a one-connection PgBouncer pool prepare the same statement name on the same
// server connection, and the second one's error says which setting fixes it; a drainer that
// LISTENs through PgBouncer (no WithListenPool, no PollOnly) warns that no NOTIFY can reach it.
func TestPgBouncer_MisconfigurationIsExplained(t *testing.T) {
	t.Parallel()
	t.Run("statement cache", func(t *testing.T) {
		t.Parallel()
		s := newPgbSetup(t, "resource_id", 1)
		cfg := s.q.config(drainer.ClaimLease)
		noop := func(context.Context, string, drEvent) error { return nil }
		firstLog, _ := drCapture(t)
		firstPool := s.pool(t, s.workerURL, "", 1)
		first, _ := drNew(t, firstPool, cfg, noop, drainer.WithLogger[drEvent](firstLog))
		drStart(t, first)
		// The first drainer has read its registration (and so prepared that statement) once it
		// has joined the LISTEN connection.
		drWaitFor(t, 10*time.Second, "the first drainer's start", func() bool { return drainer.ListenerPID(firstPool) != 0 })
		secondLog, _ := drCapture(t)
		second, _ := drNew(t, s.pool(t, s.workerURL, "", 1), cfg, noop, drainer.WithLogger[drEvent](secondLog))
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		err := second.Run(ctx)
		require.Error(t, err)
		require.Contains(t, err.Error(), "42P05")
		require.Contains(t, err.Error(), "set default_query_exec_mode=exec")
	})
	t.Run("LISTEN through the pooler", func(t *testing.T) {
		t.Parallel()
		s := newPgbSetup(t, "", 2)
		logger, buf := drCapture(t)
		d, _ := drNew(t, s.pool(t, s.workerURL, "exec", 2), s.q.config(drainer.ClaimLease),
			func(context.Context, string, drEvent) error { return nil }, drainer.WithLogger[drEvent](logger))
		drStart(t, d)
		drWaitFor(t, 10*time.Second, "the pooler warning", func() bool {
			return strings.Contains(buf.String(), "the LISTEN connection reaches PostgreSQL through a connection pooler")
		})
	})
}

// New refuses WithListenPool together with Config.PollOnly, which turns LISTEN off, naming both.
func TestPgBouncer_ListenPoolAndPollOnlyExcludeEachOther(t *testing.T) {
	t.Parallel()
	pool := drPoolForValidation(t)
	cfg := drainer.Config{Table: "public.events", PollOnly: true}
	require.NoError(t, cfg.Validate())
	_, err := drainer.New(pool, cfg, drDecode, func(context.Context, string, drEvent) error { return nil },
		drainer.WithListenPool[drEvent](pool))
	require.ErrorContains(t, err, "WithListenPool and Config.PollOnly exclude each other")
}
