package gocheck

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
)

// A queue registry bloated by dead rows (queues made and dropped, or a long-held xmin keeping VACUUM
// from removing them) and analyzed as such: its statistics then say zero rows over hundreds of pages.
// A producer's commit step still finds its queue by index. As a join, the step for a transaction of
// many statements (and for every SERIALIZABLE producer) read the whole registry on every commit:
// 250 blocks for a registry of 12,000 dead rows, until a VACUUM (fixed in 00049).
func TestProducers_CommitStepReadsAFewBlocksOfABloatedRegistry(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := orderQueue(t)
	exec(t, db.Pool, `ALTER TABLE outbox.queues SET (autovacuum_enabled = false)`)
	exec(t, db.Pool, `INSERT INTO outbox.queues (queue, table_oid, max_attempts, backoff_min, backoff_max, permanent_policy, channel)
		SELECT 'dropped_' || g, (4000000000 - g)::oid::regclass, 10, '1s', '30s', 'poison', 'dropped_' || g
		FROM generate_series(1, 12000) g`)
	exec(t, db.Pool, `DELETE FROM outbox.queues WHERE queue LIKE 'dropped\_%'`)
	exec(t, db.Pool, `ANALYZE outbox.queues`)
	var pages int
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT relpages FROM pg_class WHERE oid = 'outbox.queues'::regclass`).Scan(&pages))
	require.Greater(t, pages, 200, "the registry spans hundreds of pages of dead rows")

	// blocksOfTheRegistry runs the commit step of a producer of the given keys, one statement each,
	// at the given isolation, and returns the blocks of outbox.queues it read. The step runs inside
	// the transaction (SET CONSTRAINTS ... IMMEDIATE runs it at once), where the transaction's own
	// statistics count its reads.
	producer := loginAs(t, db, "pgdrain_producer")
	blocksOfTheRegistry := func(isolation string, keys ...string) int64 {
		t.Helper()
		tx, err := producer.Begin(ctx)
		require.NoError(t, err)
		defer func() { _ = tx.Rollback(ctx) }()
		_, err = tx.Exec(ctx, `SET TRANSACTION ISOLATION LEVEL `+isolation)
		require.NoError(t, err)
		for _, k := range keys {
			insertEvent(t, tx, k)
		}
		var before, after int64
		require.NoError(t, tx.QueryRow(ctx, `SELECT pg_stat_get_xact_blocks_fetched('outbox.queues'::regclass)`).Scan(&before))
		_, err = tx.Exec(ctx, `SET CONSTRAINTS outbox.pgdrain_commit IMMEDIATE`)
		require.NoError(t, err)
		require.NoError(t, tx.QueryRow(ctx, `SELECT pg_stat_get_xact_blocks_fetched('outbox.queues'::regclass)`).Scan(&after))
		require.NoError(t, tx.Commit(ctx))
		return after - before
	}

	require.LessOrEqual(t, blocksOfTheRegistry("READ COMMITTED", "a"), int64(4),
		"a single-row producer")
	require.LessOrEqual(t, blocksOfTheRegistry("READ COMMITTED", "a", "b", "c"), int64(4),
		"a producer of three statements")
	require.LessOrEqual(t, blocksOfTheRegistry("SERIALIZABLE", "d"), int64(4),
		"a SERIALIZABLE producer")
}
