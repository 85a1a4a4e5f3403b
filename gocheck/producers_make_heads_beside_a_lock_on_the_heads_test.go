package gocheck

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
)

// A commit step makes the heads of its new keys with lock_timeout 1 ms, so that it never waits for
// a claim making the same head inside an open batch; a key it can not make gets a wake note, which
// a later claim applies (256 a call, each such claim far dearer than one without notes). The bound
// was on one insert of every new key, so one wait gave every new key of the commit a note: here
// the one key an open lock-mode batch is making, and in a CI run a moment's wait of a bulk load of
// 13,333 new keys, whose next claims then read 8 times the buffers. Only the key held gets a note
// now, the producer still waits for nothing, and every row is delivered in order.
func TestProducers_OneHeadBeingMadeGivesOnlyItsKeyAWakeNote(t *testing.T) {
	t.Parallel()
	for _, keys := range []int{2, 50, 1000} {
		keys := keys
		t.Run(fmt.Sprintf("%d new keys", keys), func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			db := orderQueue(t)
			producer := lockTimeout2s(t, loginAs(t, db, "pgdrain_producer"))
			x1 := insertEvent(t, producer, "x1")
			tx, err := producer.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.Serializable})
			require.NoError(t, err)
			b1 := insertEvent(t, tx, "b")
			require.NoError(t, tx.Commit(ctx))

			batch, err := lockTimeout2s(t, loginAs(t, db, "pgdrain_worker")).Begin(ctx)
			require.NoError(t, err)
			defer func() { _ = batch.Rollback(ctx) }()
			require.Equal(t, []int64{x1}, claimLocked(t, batch, 1),
				"the batch claims x1 and, applying the note, makes b's head")

			// One statement: b and keys-1 keys new to the queue, b in the middle of them.
			started := time.Now()
			_, err = producer.Exec(ctx, `INSERT INTO public.events (event_type, payload, resource_id)
				SELECT 'e', '{}', CASE WHEN i = $1 / 2 THEN 'b' ELSE 'n' || i END FROM generate_series(1, $1) i`, keys)
			require.NoError(t, err, "the producer does not wait for the batch")
			t.Logf("%d new keys, one of them held: committed in %s", keys, time.Since(started))
			var noted []string
			require.NoError(t, db.Pool.QueryRow(ctx,
				`SELECT coalesce(array_agg(DISTINCT partition_key), '{}') FROM outbox.partition_wakes`).Scan(&noted))
			require.Equal(t, []string{"b"}, noted, "only the key the batch holds got a wake note")

			require.NoError(t, batch.Commit(ctx))
			delivered := drainOnce(t, db.Pool)
			require.ElementsMatch(t, idsOf(t, db.Pool, `SELECT id FROM public.events`), delivered,
				"every row delivered once")
			bs := idsOf(t, db.Pool, `SELECT id FROM public.events WHERE resource_id = 'b' ORDER BY id`)
			require.Len(t, bs, 2)
			require.Equal(t, b1, bs[0])
			require.Less(t, slices.Index(delivered, bs[0]), slices.Index(delivered, bs[1]), "b's rows in commit order")
		})
	}
}

// A lock another session holds on the heads table (VACUUM FULL, LOCK TABLE) or waits for (as
// autovacuum truncating the table's end) is waited for by producers as on any table, with their
// own lock_timeout, and their new keys get heads, not wake notes.
func TestProducers_MakeHeadsBesideAnotherSessionsLockOnTheHeads(t *testing.T) {
	t.Parallel()
	for _, shape := range []struct {
		name string
		sql  string
		keys int
	}{
		{"one row", `INSERT INTO public.events (event_type, payload, resource_id) VALUES ('e', '{}', 'k1')`, 1},
		{"many keys", `INSERT INTO public.events (event_type, payload, resource_id)
			SELECT 'e', '{}', 'k' || (i % 50 + 1) FROM generate_series(0, 199) i`, 50},
	} {
		shape := shape
		t.Run(shape.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			db := orderQueue(t)
			producer := loginAs(t, db, "pgdrain_producer")
			_, err := producer.Exec(ctx, `SET lock_timeout = '10s'`)
			require.NoError(t, err)

			holder, err := db.Pool.Begin(ctx)
			require.NoError(t, err)
			defer func() { _ = holder.Rollback(ctx) }()
			_, err = holder.Exec(ctx, `LOCK TABLE outbox.partition_heads IN ACCESS EXCLUSIVE MODE`)
			require.NoError(t, err)

			committed := make(chan error, 1)
			go func() {
				_, err := producer.Exec(ctx, shape.sql)
				committed <- err
			}()
			waitForLockWaiters(t, db.Pool, 1)
			time.Sleep(50 * time.Millisecond) // well past the 1 ms bound
			require.NoError(t, holder.Commit(ctx))
			require.NoError(t, <-committed, "the producer waited for the lock and committed")

			require.Zero(t, wakeNotes(t, db.Pool), "every new key got its head, none a wake note")
			var heads int
			require.NoError(t, db.Pool.QueryRow(ctx, `SELECT count(*)::int FROM outbox.partition_heads h
				WHERE h.head_id = (SELECT min(e.id) FROM public.events e WHERE e.resource_id = h.partition_key)`).Scan(&heads))
			require.Equal(t, shape.keys, heads, "each head at its key's first row")
		})
	}
}
