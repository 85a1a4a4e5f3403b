package gocheck

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"
)

// A bulk transaction that commits after other producers of its keys is renumbered as a whole (one
// statement, not one per row): every one of its rows lands behind the rows committed before it,
// and its own rows keep their order. Producers run as pgdrain_producer.
func TestProducers_LateBulkTransactionIsRenumberedBehindEveryEarlierCommit(t *testing.T) {
	t.Parallel()
	db := orderQueue(t)
	ctx := context.Background()
	const keys, perKey = 2000, 10

	late, err := loginAs(t, db, "pgdrain_producer").Begin(ctx)
	require.NoError(t, err)
	_, err = late.Exec(ctx, `
		INSERT INTO public.events (event_type, payload, resource_id)
		SELECT 'late', jsonb_build_object('n', g), 'key-' || (g % $1::int)
		FROM generate_series(1, $1::int * $2::int) g ORDER BY g`, keys, perKey)
	require.NoError(t, err)

	early := loginAs(t, db, "pgdrain_producer")
	_, err = early.Exec(ctx, `
		INSERT INTO public.events (event_type, payload, resource_id)
		SELECT 'early', '{}', 'key-' || g FROM generate_series(0, $1::int - 1) g`, keys)
	require.NoError(t, err)
	require.NoError(t, late.Commit(ctx))

	// Per key: the early row first, then the late rows in the order they were inserted.
	var keysOutOfOrder, lateRows int
	require.NoError(t, db.Pool.QueryRow(ctx, `
		WITH ranked AS (
			SELECT resource_id, event_type, (payload->>'n')::int AS n,
			       row_number() OVER (PARTITION BY resource_id ORDER BY id) AS pos,
			       row_number() OVER (PARTITION BY resource_id ORDER BY event_type = 'late', (payload->>'n')::int) AS want
			FROM public.events)
		SELECT count(DISTINCT resource_id) FILTER (WHERE pos <> want), count(*) FILTER (WHERE event_type = 'late')
		FROM ranked`).Scan(&keysOutOfOrder, &lateRows))
	require.Equal(t, keys*perKey, lateRows)
	require.Zero(t, keysOutOfOrder, "keys whose id order is not commit order")

	// Nothing stuck: every key has a head at its early row.
	var wrongHeads int
	require.NoError(t, db.Pool.QueryRow(ctx, `
		SELECT count(*) FROM public.events e
		LEFT JOIN outbox.partition_heads h ON h.partition_key = e.resource_id AND h.head_id = e.id
		WHERE e.event_type = 'early' AND h.head_id IS NULL`).Scan(&wrongHeads))
	require.Zero(t, wrongHeads, "early rows that are not their key's head")
}

// Many separate INSERT statements in one transaction: the keys noted by every statement reach the
// commit step, merged per key (the smallest and largest id of each).
func TestProducers_ManyStatementsInOneTransactionAreAllOrdered(t *testing.T) {
	t.Parallel()
	db := orderQueue(t)
	ctx := context.Background()
	tx, err := loginAs(t, db, "pgdrain_producer").Begin(ctx)
	require.NoError(t, err)
	for i := range 600 {
		_, err = tx.Exec(ctx, `INSERT INTO public.events (event_type, payload, resource_id)
			VALUES ('e', jsonb_build_object('n', $1::int), 'key-' || ($1::int % 50))`, i)
		require.NoError(t, err)
	}
	require.NoError(t, tx.Commit(ctx))

	var heads, wrong int
	require.NoError(t, db.Pool.QueryRow(ctx, `
		SELECT count(*), count(*) FILTER (WHERE h.head_id <> (SELECT min(id) FROM public.events e WHERE e.resource_id = h.partition_key))
		FROM outbox.partition_heads h`).Scan(&heads, &wrong))
	require.Equal(t, 50, heads)
	require.Zero(t, wrong)
	var clocks int
	require.NoError(t, db.Pool.QueryRow(ctx, `
		SELECT count(*) FROM (SELECT hashtext(resource_id) & 65535 AS slot, max(id) AS hi FROM public.events GROUP BY 1) e
		JOIN outbox.partition_clocks c ON c.slot = e.slot AND c.committed_max = e.hi`).Scan(&clocks))
	var slots int
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT count(DISTINCT hashtext(resource_id) & 65535) FROM public.events`).Scan(&slots))
	require.Equal(t, slots, clocks, "every key hash's clock is its largest committed id")
}

// A transaction of thousands of statements keeps only the span of its ids (past 8 kB of noted
// keys), and its commit step reads its keys back from its own rows in that span: rows another
// producer committed inside the span, and rows of a savepoint rolled back, are not taken for its
// own; its rows that turned late are still renumbered behind the other producer's.
func TestProducers_ThousandsOfStatementsAreOrderedFromTheirSpan(t *testing.T) {
	t.Parallel()
	db := orderQueue(t)
	ctx := context.Background()
	tx, err := loginAs(t, db, "pgdrain_producer").Begin(ctx)
	require.NoError(t, err)
	other := loginAs(t, db, "pgdrain_producer")
	insert := `INSERT INTO public.events (event_type, payload, resource_id) VALUES ($1, jsonb_build_object('n', $2::int), $3)`
	for i := range 3000 {
		if i == 1500 {
			// Another producer commits rows inside our span: of our keys (making them late) and of its own.
			_, err = other.Exec(ctx, `INSERT INTO public.events (event_type, payload, resource_id)
				SELECT 'other', '{}', k FROM unnest(ARRAY['key-7', 'key-8', 'theirs']) k`)
			require.NoError(t, err)
			_, err = tx.Exec(ctx, `SAVEPOINT s`)
			require.NoError(t, err)
			_, err = tx.Exec(ctx, insert, "undone", i, "undone-key")
			require.NoError(t, err)
			_, err = tx.Exec(ctx, `ROLLBACK TO SAVEPOINT s`)
			require.NoError(t, err)
		}
		_, err = tx.Exec(ctx, insert, "mine", i, fmt.Sprintf("key-%d", i%200))
		require.NoError(t, err)
	}
	require.NoError(t, tx.Commit(ctx))

	// Every key's head is its first pending row; no head for the rolled-back key.
	var heads, wrong int
	require.NoError(t, db.Pool.QueryRow(ctx, `
		SELECT count(*), count(*) FILTER (WHERE h.head_id <> (SELECT min(id) FROM public.events e WHERE e.resource_id = h.partition_key))
		FROM outbox.partition_heads h`).Scan(&heads, &wrong))
	require.Equal(t, 201, heads, "200 keys of ours and 'theirs'")
	require.Zero(t, wrong)
	// key-7 and key-8 turned late: the other producer's row comes first, ours follow in their order.
	var outOfOrder int
	require.NoError(t, db.Pool.QueryRow(ctx, `
		WITH ranked AS (
			SELECT resource_id, row_number() OVER (PARTITION BY resource_id ORDER BY id) AS pos,
			       row_number() OVER (PARTITION BY resource_id ORDER BY event_type <> 'other', (payload->>'n')::int) AS want
			FROM public.events WHERE resource_id IN ('key-7', 'key-8'))
		SELECT count(*) FILTER (WHERE pos <> want) FROM ranked`).Scan(&outOfOrder))
	require.Zero(t, outOfOrder)
}
