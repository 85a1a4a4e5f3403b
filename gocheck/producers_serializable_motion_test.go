package gocheck

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
)

// A SERIALIZABLE producer's commit step takes no predicate lock (SIReadLock) on anything other
// producers or claims write: not on the pages of outbox.commit_hooks, commit_notes,
// partition_clocks, partition_heads or partition_wakes, nor their indexes. Page locks there were
// how unrelated SERIALIZABLE producers failed in motion: each commit step read the page the next
// producer's hook, note, clock or head went into, and three overlapping producers made a
// read/write chain PostgreSQL cancels (until 00023; the pairs of the test above never overlap three
// ways). Only outbox.queues is read, which only create_queue, set_notify and TRUNCATE write. Run
// with SET CONSTRAINTS ALL IMMEDIATE, which runs the commit step at the end of the statement;
// new keys, keys with heads and both, one and many statements, as pgdrain_producer; every row is
// then delivered.
func TestProducers_SerializableCommitStepTakesNoPredicateLockOthersWrite(t *testing.T) {
	t.Parallel()
	db := orderQueue(t)
	ctx := context.Background()
	exec(t, db.Pool, `INSERT INTO public.events (event_type, payload, resource_id)
		SELECT 'seed', '{}', 'old-' || g FROM generate_series(1, 10) g`)
	require.Len(t, drainOnce(t, db.Pool), 10)
	exec(t, db.Pool, `INSERT INTO public.events (event_type, payload, resource_id)
		SELECT 'seed', '{}', 'held-' || g FROM generate_series(1, 10) g`)
	producer := loginPool(t, db, "pgdrain_producer")
	insert := `INSERT INTO public.events (event_type, payload, resource_id) SELECT 'e', '{}', k FROM unnest($1::text[]) k`
	written := 0
	for _, c := range []struct {
		what       string
		statements [][]string
	}{
		{"one new key", [][]string{{"new-1"}}},
		{"a key whose head was emptied", [][]string{{"old-1"}}},
		{"a key with pending rows", [][]string{{"held-1"}}},
		{"new keys and keys with heads", [][]string{{"new-2", "old-2", "held-2", "new-3"}}},
		{"three statements", [][]string{{"new-4"}, {"old-3", "new-4"}, {"held-3"}}},
	} {
		tx, err := producer.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.Serializable})
		require.NoError(t, err)
		defer func() { _ = tx.Rollback(ctx) }()
		for _, keys := range c.statements {
			_, err = tx.Exec(ctx, insert, keys)
			require.NoError(t, err, c.what)
			written += len(keys)
		}
		_, err = tx.Exec(ctx, `SET CONSTRAINTS ALL IMMEDIATE`)
		require.NoError(t, err, c.what)
		rows, err := tx.Query(ctx, `SELECT l.relation::regclass::text || ' ' || l.locktype
			FROM pg_catalog.pg_locks l JOIN pg_catalog.pg_class r ON r.oid = l.relation
			WHERE l.pid = pg_catalog.pg_backend_pid() AND l.mode = 'SIReadLock'
			  AND r.relnamespace = 'outbox'::regnamespace
			  AND r.oid NOT IN (SELECT 'outbox.queues'::regclass UNION ALL
			                    SELECT i.indexrelid FROM pg_catalog.pg_index i WHERE i.indrelid = 'outbox.queues'::regclass)
			ORDER BY 1`)
		require.NoError(t, err, c.what)
		locks, err := pgx.CollectRows(rows, pgx.RowTo[string])
		require.NoError(t, err, c.what)
		require.Empty(t, locks, "%s: predicate locks on what other transactions write", c.what)
		require.NoError(t, tx.Commit(ctx), c.what)
	}
	require.Len(t, drainUntil(t, db.Pool, written+10), written+10, "every row is delivered")
}

// Eight SERIALIZABLE producers of unrelated keys (no two in one clock slot), writing at once for
// 150 transactions each (one to three keys per transaction, new keys and keys with heads, as
// pgdrain_producer), while a drainer claims and delivers: none fails. Before 00023 about one in a
// thousand failed with 40001 ("identification as a pivot") and the same load on the table alone
// never does. Everything written is then delivered, in commit order per key.
func TestProducers_SerializableProducersInMotionNeverFail(t *testing.T) {
	t.Parallel()
	db := orderQueue(t)
	ctx := context.Background()
	const producers, transactions = 8, 150
	keys := distinctSlotKeys(t, db.Pool, "motion", producers*transactions)
	exec(t, db.Pool, `INSERT INTO public.events (event_type, payload, resource_id)
		SELECT 'seed', '{}', k FROM unnest($1::text[]) WITH ORDINALITY AS u(k, n) WHERE n % 2 = 0`, keys)
	producer := loginPool(t, db, "pgdrain_producer")
	insert := `INSERT INTO public.events (event_type, payload, resource_id) SELECT 'e', '{}', k FROM unnest($1::text[]) k`

	stop := make(chan struct{})
	drained := make(chan int)
	go func() {
		n := 0
		for {
			select {
			case <-stop:
				drained <- n
				return
			default:
				// Not drainOnce: require must not run outside the test's goroutine.
				sent, err := deliverClaimed(ctx, db.Pool)
				if err != nil {
					t.Errorf("drainer: %v", err)
				}
				n += len(sent)
			}
		}
	}()
	var wg sync.WaitGroup
	failures := make([][]string, producers)
	written := make([]int, producers)
	for p := range producers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			mine := keys[p*transactions : (p+1)*transactions]
			for i := range transactions {
				batch := mine[i : i+1+i%3-max(0, i+1+i%3-transactions)]
				err := pgx.BeginTxFunc(ctx, producer, pgx.TxOptions{IsoLevel: pgx.Serializable}, func(tx pgx.Tx) error {
					_, err := tx.Exec(ctx, insert, batch)
					return err
				})
				if err != nil {
					failures[p] = append(failures[p], fmt.Sprintf("%v: %v", batch, err))
					continue
				}
				written[p] += len(batch)
			}
		}()
	}
	wg.Wait()
	close(stop)
	delivered := <-drained
	for p := range producers {
		require.Empty(t, failures[p], "producer %d", p)
	}
	total := 0
	for _, n := range written {
		total += n
	}
	seeded := producers * transactions / 2
	delivered += len(drainUntil(t, db.Pool, total+seeded-delivered))
	require.Equal(t, total+seeded, delivered, "every row is delivered")
	var violations int
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT count(*) FROM (
		SELECT id < lag(id) OVER (PARTITION BY resource_id ORDER BY sent_at, id) AS behind FROM public.events) s
		WHERE behind`).Scan(&violations))
	require.Zero(t, violations)
}
