package gocheck

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pgdrain/pgdrain/internal/testdb"
)

// A rebuild of the heads in parts notes where its last part stopped (outbox.partition_heads_restored,
// a key) and the next part goes on past that key. Between parts the queue table can change under
// it: emptied by TRUNCATE, unregistered and registered again, or the noted key gone. The next parts
// must still give every pending row a head: afterwards the heads are built, every row is delivered
// once, per key in commit order, and repair finds nothing.

// TRUNCATE of the queue table between parts (plain, and RESTART IDENTITY, which hands out the old
// ids again) ends the rebuild: the empty table's heads are built, and no progress row is left
// pointing at a key that no longer exists (since 00049). Rows written afterwards, of keys before
// and after that key and of new keys, by single-row and many-key producers, are all delivered.
func TestRebuildInParts_TableTruncatedBetweenParts(t *testing.T) {
	t.Parallel()
	for _, truncate := range []string{"TRUNCATE public.events", "TRUNCATE public.events RESTART IDENTITY"} {
		t.Run(truncate, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			db, _ := crashedBacklog(t)
			qid := queueIDOf(t, db, "public.events")
			worker := lockTimeout1s(t, loginAs(t, db, "pgdrain_worker"))
			deliverLeased(t, worker, 1, map[string][]int64{})
			part1End := requireRebuildUnderway(t, db, qid, "the first claim made one part")
			beforeEnd := pendingKeyAfter(t, db, "", 100)
			pastEnd := pendingKeyAfter(t, db, part1End, 1000)

			exec(t, db.Pool, truncate)
			var heads int
			require.NoError(t, db.Pool.QueryRow(ctx, `SELECT count(*)::int FROM outbox.partition_heads WHERE queue_id = $1`, qid).Scan(&heads))
			require.Zero(t, heads, "TRUNCATE took the heads with the rows")
			// An empty table's heads are complete: the rebuild ends with the TRUNCATE, rather than go
			// on past a key that is gone.
			requireRebuildDone(t, db, qid)

			producer := loginAs(t, db, "pgdrain_producer")
			committed := map[string][]int64{}
			commit := func(keys ...string) {
				t.Helper()
				tx, err := producer.Begin(ctx)
				require.NoError(t, err)
				defer func() { _ = tx.Rollback(ctx) }()
				ids := make([]int64, len(keys))
				for i, k := range keys {
					ids[i] = insertEvent(t, tx, k)
				}
				require.NoError(t, tx.Commit(ctx))
				for i, k := range keys {
					committed[k] = append(committed[k], ids[i])
				}
			}
			commit(part1End)
			commit(beforeEnd)
			commit(pastEnd)
			commit("a-new")
			commit(part1End, pastEnd, beforeEnd, "a-new", "z-new")
			commit(beforeEnd)
			commit("z-new")

			drainAndRequireAllDelivered(t, db, qid, committed, map[string][]int64{})
		})
	}
}

// drop_queue between parts takes the progress row of the queue with it, and create_queue of the
// same table registers it again under a new queue_id and rebuilds its heads whole, at once: no
// progress row is left of either queue_id, and every row, old and new, is delivered.
func TestRebuildInParts_QueueDroppedAndCreatedAgainBetweenParts(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, committed := crashedBacklog(t)
	oldQid := queueIDOf(t, db, "public.events")
	delivered := map[string][]int64{}
	worker := lockTimeout1s(t, loginAs(t, db, "pgdrain_worker"))
	deliverLeased(t, worker, 1, delivered)
	part1End := requireRebuildUnderway(t, db, oldQid, "the first claim made one part")

	exec(t, db.Pool, `SELECT outbox.drop_queue('public.events')`)
	var leftOver int
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM outbox.partition_heads_restored WHERE queue_id = $1)
		+ (SELECT count(*) FROM outbox.partition_heads WHERE queue_id = $1)
		+ (SELECT count(*) FROM outbox.partition_heads_built WHERE queue_id = $1)`, oldQid).Scan(&leftOver))
	require.Zero(t, leftOver, "drop_queue leaves no progress row, head or built-mark of the queue")

	exec(t, db.Pool, `SELECT outbox.create_queue('public.events', 'resource_id')`)
	newQid := queueIDOf(t, db, "public.events")
	require.NotEqual(t, oldQid, newQid)
	requireRebuildDone(t, db, newQid)
	var progress, missing int
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT count(*)::int FROM outbox.partition_heads_restored`).Scan(&progress))
	require.Zero(t, progress, "no progress row of either queue_id")
	require.NoError(t, db.Pool.QueryRow(ctx, `
		SELECT count(DISTINCT t.resource_id)::int FROM public.events t
		WHERE t.sent_at IS NULL
		  AND NOT EXISTS (SELECT 1 FROM outbox.partition_heads h WHERE h.queue_id = $1 AND h.partition_key = t.resource_id)`,
		newQid).Scan(&missing))
	require.Zero(t, missing, "create_queue gave every key with pending rows its head")

	producer := loginAs(t, db, "pgdrain_producer")
	for _, k := range []string{part1End, pendingKeyAfter(t, db, part1End, 1000), "a-new"} {
		committed[k] = append(committed[k], insertEvent(t, producer, k))
	}
	drainAndRequireAllDelivered(t, db, newQid, committed, delivered)
}

// The key a part stopped at loses all its rows before the next part (an operator's purge), and so
// does the key right after it, the first the next part would take; the next part goes on past
// where the key was, and rows written of both keys afterwards are delivered after nothing of theirs.
func TestRebuildInParts_KeyAtTheBoundaryGoneBetweenParts(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, committed := crashedBacklog(t)
	qid := queueIDOf(t, db, "public.events")
	delivered := map[string][]int64{}
	worker := lockTimeout1s(t, loginAs(t, db, "pgdrain_worker"))
	deliverLeased(t, worker, 1, delivered)
	part1End := requireRebuildUnderway(t, db, qid, "the first claim made one part")
	nextStart := pendingKeyAfter(t, db, part1End, 1)

	purge := func(key string) {
		t.Helper()
		exec(t, db.Pool, `DELETE FROM public.events WHERE resource_id = $1`, key)
		delete(committed, key)
	}
	purge(part1End)
	purge(nextStart)
	after := requireRebuildUnderway(t, db, qid, "the purge changes nothing of the rebuild")
	require.Equal(t, part1End, after)

	// The next part, by a claim that commits; the keys gone are written again after it.
	deliverLeased(t, worker, 1, delivered)
	part2End := requireRebuildUnderway(t, db, qid, "the second claim made one part")
	require.Greater(t, part2End, nextStart)
	var heads int
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT count(*)::int FROM outbox.partition_heads
		WHERE queue_id = $1 AND partition_key > $2 AND partition_key <= $3`, qid, part1End, part2End).Scan(&heads))
	require.Equal(t, countPendingKeys(t, db, part1End, part2End), heads,
		"the part gave a head to every key with pending rows past the key gone, up to where it stopped")

	producer := loginAs(t, db, "pgdrain_producer")
	for _, k := range []string{part1End, nextStart, part1End} {
		committed[k] = append(committed[k], insertEvent(t, producer, k))
	}
	drainAndRequireAllDelivered(t, db, qid, committed, delivered)
}

// countPendingKeys counts the keys with unsent rows in (after, upTo].
func countPendingKeys(t *testing.T, db *testdb.DB, after, upTo string) int {
	t.Helper()
	var n int
	require.NoError(t, db.Pool.QueryRow(context.Background(), `SELECT count(DISTINCT resource_id)::int FROM public.events
		WHERE sent_at IS NULL AND resource_id > $1 AND resource_id <= $2`, after, upTo).Scan(&n))
	return n
}

// pg_dump between parts and a restore into a new database (whole, and schema first then data, whose
// rows go through the producers' commit step): the restored database carries the heads and the
// progress row of the same snapshot (pg_dump writes UNLOGGED tables' rows too), its rebuild goes
// on from the key noted, and every row not delivered before the dump is delivered there.
func TestRebuildInParts_DumpedAndRestoredBetweenParts(t *testing.T) {
	t.Parallel()
	db, committed := crashedBacklog(t)
	qid := queueIDOf(t, db, "public.events")
	delivered := map[string][]int64{}
	worker := lockTimeout1s(t, loginAs(t, db, "pgdrain_worker"))
	deliverLeased(t, worker, 1, delivered)
	part1End := requireRebuildUnderway(t, db, qid, "the first claim made one part")
	dump := filepath.Join(t.TempDir(), "src.dump")
	pgTool(t, "pg_dump", "-Fc", "-f", dump, "-d", db.URL)

	for _, mode := range []string{"whole", "schema, then data"} {
		t.Run(mode, func(t *testing.T) {
			dst := testdb.NewEmpty(t)
			if mode == "whole" {
				pgTool(t, "pg_restore", "--exit-on-error", "-d", dst.URL, dump)
			} else {
				pgTool(t, "pg_restore", "--exit-on-error", "--schema-only", "-d", dst.URL, dump)
				pgTool(t, "pg_restore", "--exit-on-error", "--data-only", "-d", dst.URL, dump)
			}
			require.Equal(t, qid, queueIDOf(t, dst, "public.events"))
			require.Equal(t, part1End, requireRebuildUnderway(t, dst, qid, "the restore carries the rebuild's progress"))

			restored := map[string][]int64{}
			for k, ids := range delivered {
				restored[k] = append([]int64(nil), ids...)
			}
			for k, ids := range drainLocked(t, dst) {
				restored[k] = append(restored[k], ids...)
			}
			requireRebuildDone(t, dst, qid)
			requireEachRowOnceInCommitOrder(t, committed, restored)
			requireRepairFindsNothing(t, dst)
		})
	}
}
