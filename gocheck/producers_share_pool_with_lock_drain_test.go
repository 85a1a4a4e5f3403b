package gocheck

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/pgdrain/pgdrain/drainer"
)

// The standstill of issue 29 item 1: a lock-mode drain whose producers and delivery share one pool
// of 4 connections stopped for good (producers at COMMIT waited on an open claim_locked batch,
// which waited for a pool connection to deliver). Four producers, as pgdrain_producer, write hot
// keys and new keys (single-row, two-key, and SERIALIZABLE ones, whose wake notes make the batch
// make heads); the Applier writes through the same pool. Every event is delivered once, each key
// in id order (commit order), and the drain settles well before its deadline. At this size it
// settles on 00024 too (about 1,500 events in 3 s): the exact waits are pinned by
// TestProducers_NeverWaitBesideAnOpenLockModeBatch; this is the shape users run, kept green.
func TestProducers_ShareAPoolWithALockModeDrain(t *testing.T) {
	t.Parallel()
	db := orderQueue(t)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	exec(t, db.Pool, `CREATE TABLE public.applied (id bigint PRIMARY KEY)`)
	exec(t, db.Pool, `GRANT INSERT ON public.applied TO pgdrain_producer`)
	// One login for the service, a producer and a worker, as services that produce and drain are.
	cfg, err := pgxpool.ParseConfig(loginURL(t, db, "pgdrain_producer"))
	require.NoError(t, err)
	exec(t, db.Pool, `GRANT pgdrain_worker TO `+pgx.Identifier{cfg.ConnConfig.User}.Sanitize())
	cfg.MaxConns = 4
	shared, err := pgxpool.NewWithConfig(ctx, cfg)
	require.NoError(t, err)
	defer shared.Close()

	var mu sync.Mutex
	delivered := map[string][]int64{}
	seen := map[int64]int{}
	apply := func(ctx context.Context, _ string, _ json.RawMessage) error {
		e, _ := drainer.EventFrom(ctx)
		if _, err := shared.Exec(ctx, `INSERT INTO public.applied (id) VALUES ($1) ON CONFLICT DO NOTHING`, e.ID); err != nil {
			return err
		}
		mu.Lock()
		defer mu.Unlock()
		delivered[e.PartitionKey] = append(delivered[e.PartitionKey], e.ID)
		seen[e.ID]++
		return nil
	}
	d, err := drainer.New(shared, drainer.Config{Table: "public.events", ClaimMode: drainer.ClaimLock, BatchSize: 16,
		ApplyConcurrency: 4, PollFallback: 100 * time.Millisecond},
		func(b []byte) (json.RawMessage, error) { return b, nil }, apply,
		drainer.WithLogger[json.RawMessage](slog.New(slog.NewTextHandler(io.Discard, nil))))
	require.NoError(t, err)
	drainCtx, stopDrain := context.WithCancel(ctx)
	drained := make(chan error, 1)
	go func() { drained <- d.Run(drainCtx) }()

	const producers, transactions = 4, 300
	var wg sync.WaitGroup
	written := make(chan int, producers)
	for p := range producers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(p), 29))
			n := 0
			for i := range transactions {
				iso := pgx.ReadCommitted
				if i%2 == 0 {
					iso = pgx.Serializable
				}
				keys := []string{fmt.Sprintf("hot-%d", rng.IntN(8))}
				if i%3 == 0 {
					keys = append(keys, fmt.Sprintf("new-%d-%d", p, i))
				}
				err := pgx.BeginTxFunc(ctx, shared, pgx.TxOptions{IsoLevel: iso}, func(tx pgx.Tx) error {
					for _, k := range keys {
						if _, err := tx.Exec(ctx, `INSERT INTO public.events (event_type, payload, resource_id) VALUES ('e', '{}', $1)`, k); err != nil {
							return err
						}
					}
					return nil
				})
				if code, _ := sqlState(err); code == "40001" {
					continue // overtaken SERIALIZABLE producer: documented, nothing written
				}
				if !assertNoErr(t, err, "producer") {
					return
				}
				n += len(keys)
			}
			written <- n
		}()
	}
	wg.Wait()
	close(written)
	total := 0
	for n := range written {
		total += n
	}

	start := time.Now()
	for {
		mu.Lock()
		got := len(seen)
		mu.Unlock()
		if got >= total {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("the drain did not settle: %d of %d events delivered", got, total)
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("%d events from %d producers on a pool of 4 shared with a lock-mode drain; settled %s after the last commit",
		total, producers, time.Since(start).Round(time.Millisecond))
	stopDrain()
	require.NoError(t, <-drained)

	mu.Lock()
	defer mu.Unlock()
	for id, n := range seen {
		require.Equal(t, 1, n, "event %d delivered once", id)
	}
	for key, ids := range delivered {
		for i := 1; i < len(ids); i++ {
			require.Less(t, ids[i-1], ids[i], "key %s in commit order", key)
		}
	}
	var pending int
	require.NoError(t, db.Pool.QueryRow(context.Background(), `SELECT pending FROM outbox.stats('public.events')`).Scan(&pending))
	require.Zero(t, pending)
}
