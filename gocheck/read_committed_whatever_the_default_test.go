package gocheck

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/pgdrain/pgdrain/drainer"
	"github.com/pgdrain/pgdrain/escalation"
	"github.com/pgdrain/pgdrain/internal/testdb"
)

// defaultIsolation makes new connections to db begin transactions in level, as a team that sets
// default_transaction_isolation for its whole database does.
func defaultIsolation(t *testing.T, db *testdb.DB, level string) {
	t.Helper()
	exec(t, db.Pool, `ALTER DATABASE `+pgx.Identifier{db.Name}.Sanitize()+` SET default_transaction_isolation = '`+level+`'`)
}

// A database whose connections begin in SERIALIZABLE or REPEATABLE READ: two lease-mode and two
// lock-mode replicas, as pgdrain_worker, drain what four producers commit. The drainers' claims,
// results and leases run in READ COMMITTED (before, most of them failed with 40001 and backed off,
// up to 3.2 s a time: about 70 warnings for 1,700 events); every event is delivered, each key in
// commit order, and no drainer logs a warning.
func TestDrainer_RunsInReadCommittedWhateverTheDatabaseDefault(t *testing.T) {
	t.Parallel()
	for _, level := range []string{"serializable", "repeatable read"} {
		t.Run(level, func(t *testing.T) {
			t.Parallel()
			db := orderQueue(t)
			defaultIsolation(t, db, level)
			ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
			defer cancel()

			var mu sync.Mutex
			delivered := map[string][]int64{}
			seen := map[int64]bool{}
			apply := func(ctx context.Context, _ string, _ json.RawMessage) error {
				e, _ := drainer.EventFrom(ctx)
				mu.Lock()
				defer mu.Unlock()
				if !seen[e.ID] {
					delivered[e.PartitionKey] = append(delivered[e.PartitionKey], e.ID)
				}
				seen[e.ID] = true
				return nil
			}
			var logs syncBuffer
			drainCtx, stopDrain := context.WithCancel(ctx)
			var runs []chan error
			for i, mode := range []drainer.ClaimMode{drainer.ClaimLease, drainer.ClaimLease, drainer.ClaimLock, drainer.ClaimLock} {
				pool, err := pgxpool.New(ctx, loginURL(t, db, "pgdrain_worker"))
				require.NoError(t, err)
				defer pool.Close()
				d, err := drainer.New(pool, drainer.Config{Table: "public.events", ClaimMode: mode, BatchSize: 16,
					ApplyConcurrency: 4, PollFallback: 100 * time.Millisecond},
					func(b []byte) (json.RawMessage, error) { return b, nil }, apply,
					drainer.WithLogger[json.RawMessage](slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelInfo})).With("replica", i)))
				require.NoError(t, err)
				ch := make(chan error, 1)
				go func() { ch <- d.Run(drainCtx) }()
				runs = append(runs, ch)
			}

			// Producers in READ COMMITTED: this test is about the drainers (REPEATABLE READ and
			// SERIALIZABLE producers of one key fail with 40001 when overtaken, docs/ordering.md).
			producer, err := pgxpool.New(ctx, loginURL(t, db, "pgdrain_producer"))
			require.NoError(t, err)
			defer producer.Close()
			var wg sync.WaitGroup
			var total int
			var tmu sync.Mutex
			for p := range 4 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					rng := rand.New(rand.NewPCG(uint64(p), 7))
					for i := range 300 {
						keys := []string{fmt.Sprintf("hot-%d", rng.IntN(8))}
						if i%3 == 0 {
							keys = append(keys, fmt.Sprintf("new-%d-%d", p, i))
						}
						err := pgx.BeginTxFunc(ctx, producer, pgx.TxOptions{IsoLevel: pgx.ReadCommitted}, func(tx pgx.Tx) error {
							for _, k := range keys {
								if _, err := tx.Exec(ctx, `INSERT INTO public.events (event_type, payload, resource_id) VALUES ('e', '{}', $1)`, k); err != nil {
									return err
								}
							}
							return nil
						})
						if !assertNoErr(t, err, "producer") {
							return
						}
						tmu.Lock()
						total += len(keys)
						tmu.Unlock()
					}
				}()
			}
			wg.Wait()
			require.Eventually(t, func() bool {
				mu.Lock()
				defer mu.Unlock()
				return len(seen) == total
			}, 60*time.Second, 50*time.Millisecond, "every event delivered; logs:\n%s", logs.String())
			stopDrain()
			for _, ch := range runs {
				require.NoError(t, <-ch)
			}

			mu.Lock()
			defer mu.Unlock()
			for key, ids := range delivered {
				for i := 1; i < len(ids); i++ {
					require.Less(t, ids[i-1], ids[i], "key %s in commit order", key)
				}
			}
			out := logs.String()
			require.NotContains(t, out, "level=WARN", "no drainer warned (a 40001 is retried with a warning)")
			require.NotContains(t, out, "level=ERROR")
			require.Equal(t, 4, strings.Count(out, "default_transaction_isolation="+strings.ReplaceAll(level, " ", ""))+
				strings.Count(out, `default_transaction_isolation="`+level+`"`), "each replica says once what it does about the default:\n%s", out)
		})
	}
}

// The escalation engine in a database whose connections begin in SERIALIZABLE: three engines walk
// 60 ladders of three steps; every step is delivered once and no engine logs a warning (before,
// taking and applying steps failed with 40001 whenever engines met on a row).
func TestEscalation_RunsInReadCommittedWhateverTheDatabaseDefault(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	db := testdb.New(t)
	defaultIsolation(t, db, "serializable")
	pool, err := pgxpool.New(ctx, db.URL)
	require.NoError(t, err)
	defer pool.Close()
	policy := ladderPolicy(t, pool, "telegram", "0s", "50 milliseconds", "100 milliseconds")
	const ladders = 60
	for i := range ladders {
		firingAlert(t, pool, fmt.Sprintf("alert %d", i), policy, time.Second)
	}

	var logs syncBuffer
	runCtx, stop := context.WithCancel(ctx)
	var runs []chan error
	for i := range 3 {
		e := newEngine(t, pool, map[string]escalation.Notifier{"telegram": escalation.TelegramNotifier{Sender: &fakeTelegram{}}},
			escalation.Config{Tick: 20 * time.Millisecond, BatchSize: 10,
				Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelInfo})).With("engine", i)})
		ch := make(chan error, 1)
		go func() { ch <- e.Run(runCtx) }()
		runs = append(runs, ch)
	}
	require.Eventually(t, func() bool { return len(journal(t, pool)) >= 3*ladders }, 40*time.Second, 50*time.Millisecond,
		"every step delivered; logs:\n%s", logs.String())
	stop()
	for _, ch := range runs {
		require.NoError(t, <-ch)
	}
	for step, n := range deliveriesPerStep(t, pool) {
		require.Equal(t, 1, n, "step %s delivered once", step)
	}
	require.Len(t, deliveriesPerStep(t, pool), 3*ladders)
	out := logs.String()
	require.NotContains(t, out, "level=WARN", "no engine warned")
	require.NotContains(t, out, "level=ERROR")
	require.Equal(t, 3, strings.Count(out, "READ COMMITTED transaction of its own"), "each engine says once what it does:\n%s", out)
}

// The database's default isolation changes to SERIALIZABLE under running drainers, and their
// connections are replaced (a failover, a pool recycling them): each replica's first serialization
// failure switches it to READ COMMITTED transactions of its own, so a handful of warnings, not a
// storm (before: the check at start was never made again, and every claim and result kept failing
// with 40001), and every event is delivered in commit order.
func TestDrainer_SwitchesToReadCommittedWhenTheDefaultChangesUnderIt(t *testing.T) {
	t.Parallel()
	db := orderQueue(t)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	var mu sync.Mutex
	delivered := map[string][]int64{}
	seen := map[int64]bool{}
	apply := func(ctx context.Context, _ string, _ json.RawMessage) error {
		e, _ := drainer.EventFrom(ctx)
		mu.Lock()
		defer mu.Unlock()
		if !seen[e.ID] {
			delivered[e.PartitionKey] = append(delivered[e.PartitionKey], e.ID)
		}
		seen[e.ID] = true
		return nil
	}
	var logs syncBuffer
	drainCtx, stopDrain := context.WithCancel(ctx)
	var runs []chan error
	for i, mode := range []drainer.ClaimMode{drainer.ClaimLease, drainer.ClaimLease, drainer.ClaimLock, drainer.ClaimLock} {
		pool, err := pgxpool.New(ctx, loginURL(t, db, "pgdrain_worker"))
		require.NoError(t, err)
		defer pool.Close()
		d, err := drainer.New(pool, drainer.Config{Table: "public.events", ClaimMode: mode, BatchSize: 16,
			ApplyConcurrency: 4, PollFallback: 100 * time.Millisecond},
			func(b []byte) (json.RawMessage, error) { return b, nil }, apply,
			drainer.WithLogger[json.RawMessage](slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelInfo})).With("replica", i)))
		require.NoError(t, err)
		ch := make(chan error, 1)
		go func() { ch <- d.Run(drainCtx) }()
		runs = append(runs, ch)
	}
	time.Sleep(500 * time.Millisecond) // the replicas started under READ COMMITTED
	defaultIsolation(t, db, "serializable")
	exec(t, db.Pool, `SELECT pg_terminate_backend(pid) FROM pg_stat_activity
		WHERE datname = current_database() AND pid <> pg_backend_pid() AND usename <> current_user`)

	producer, err := pgxpool.New(ctx, loginURL(t, db, "pgdrain_producer"))
	require.NoError(t, err)
	defer producer.Close()
	var wg sync.WaitGroup
	var total int
	var tmu sync.Mutex
	for p := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 150 {
				err := pgx.BeginTxFunc(ctx, producer, pgx.TxOptions{IsoLevel: pgx.ReadCommitted}, func(tx pgx.Tx) error {
					_, err := tx.Exec(ctx, `INSERT INTO public.events (event_type, payload, resource_id) VALUES ('e', '{}', $1)`,
						fmt.Sprintf("hot-%d", (p+i)%8))
					return err
				})
				if !assertNoErr(t, err, "producer") {
					return
				}
				tmu.Lock()
				total++
				tmu.Unlock()
			}
		}()
	}
	wg.Wait()
	require.Eventually(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(seen) == total
	}, 60*time.Second, 50*time.Millisecond, "every event delivered; logs:\n%s", logs.String())
	stopDrain()
	for _, ch := range runs {
		require.NoError(t, <-ch)
	}
	mu.Lock()
	defer mu.Unlock()
	for key, ids := range delivered {
		for i := 1; i < len(ids); i++ {
			require.Less(t, ids[i-1], ids[i], "key %s in commit order", key)
		}
	}
	out := logs.String()
	require.LessOrEqual(t, strings.Count(out, "SQLSTATE 40001"), 8, "a few serialization failures, not a storm:\n%s", out)
	require.Contains(t, out, "the drainer runs each statement in a READ COMMITTED transaction of its own from now on")
}
