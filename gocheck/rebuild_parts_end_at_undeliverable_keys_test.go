package gocheck

import (
	"context"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pgdrain/pgdrain/internal/testdb"
)

// A rebuild part takes keys 500 at a time (poisoned-only keys count: they have unsent rows) and
// stops after a whole chunk, so in a backlog of which no key is delivered before the rebuild
// reaches it, every part ends at a key whose position in key order is a multiple of 500, and the
// next starts at the one after. Here those keys are the ones nothing can be delivered of: a
// poisoned-only key (no head) and a key whose only row is due days from now (a head parked until
// then), each way round; beside them keys whose first row is poisoned (the head goes to the next)
// or due days from now (the key's next row waits behind it). Every part ends where expected, and
// afterwards the heads are built, every deliverable row is delivered once, per key in commit
// order, nothing else is, and repair finds nothing.
func TestRebuildInParts_PartsEndAtPoisonedOnlyAndFarFutureKeys(t *testing.T) {
	t.Parallel()
	for _, sc := range []struct{ last, first string }{{"poisoned", "future"}, {"future", "poisoned"}} {
		t.Run("parts end at a "+sc.last+" key, the next starts at a "+sc.first+" key", func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			db := orderQueue(t)
			qid := queueIDOf(t, db, "public.events")
			// Key k<g> at position g: g % 500 = 0 is sc.last (the last key of a part), 1 is sc.first,
			// 499 a poisoned row then a deliverable one, 498 a row due in 6 days then a due one.
			exec(t, db.Pool, `WITH kinds AS (
				  SELECT g, r, CASE g % 500 WHEN 0 THEN $2 WHEN 1 THEN CASE WHEN g > 1 THEN $3 END
				                            WHEN 499 THEN 'poisoned first' WHEN 498 THEN 'future first' END AS kind
				  FROM generate_series(1, 2) r, generate_series(1, $1::int) g
				  WHERE r = 1 OR g % 10 = 0 OR g % 500 IN (498, 499))
				INSERT INTO public.events (event_type, payload, resource_id, attempt_count, next_attempt_at)
				SELECT 'e', '{}', 'k' || lpad(g::text, 5, '0'),
				       CASE WHEN kind = 'poisoned' OR (kind = 'poisoned first' AND r = 1) THEN 10 ELSE 0 END,
				       CASE WHEN kind = 'future' OR (kind = 'future first' AND r = 1) THEN now() + interval '6 days' END
				FROM kinds ORDER BY r, g`, rebuildBacklogKeys, sc.last, sc.first)
			exec(t, db.Pool, `VACUUM ANALYZE public.events`)
			// What can be delivered: rows not poisoned, of keys with no row due later.
			committed := rowsByKey(t, db, `attempt_count < 10 AND NOT EXISTS (
				SELECT 1 FROM public.events f WHERE f.resource_id = events.resource_id AND f.next_attempt_at > now())`)
			crashResetAll(t, db)

			partEnds := map[string]bool{}
			noteProgress := func() {
				var after *string
				require.NoError(t, db.Pool.QueryRow(ctx,
					`SELECT (SELECT after_key FROM outbox.partition_heads_restored WHERE queue_id = $1)`, qid).Scan(&after))
				if after != nil {
					partEnds[*after] = true
				}
			}
			delivered := drainLocked(t, db, noteProgress)
			require.GreaterOrEqual(t, len(partEnds), 3, "the rebuild took several parts: %v", partEnds)
			for k := range partEnds {
				g, err := strconv.Atoi(k[1:])
				require.NoError(t, err)
				require.Zero(t, g%500, "part end %s is a multiple of 500 keys (a %s key)", k, sc.last)
			}

			requireRebuildDone(t, db, qid)
			requireEachRowOnceInCommitOrder(t, committed, delivered)
			requireHeadsOfUndeliverableKeys(t, db, qid, sc.last)
			requireRepairFindsNothing(t, db)
		})
	}
}

// requireHeadsOfUndeliverableKeys requires no head for a poisoned-only key, and for a key whose
// first deliverable row is due later a head at that row, parked until it is due. last is the kind
// of the keys at positions 500, 1000, ... (60 keys; the other kind has 59, at 501, 1001, ...).
func requireHeadsOfUndeliverableKeys(t *testing.T, db *testdb.DB, qid int, last string) {
	t.Helper()
	var poisonedOnly, poisonedWithHead, waiting, waitingWrong int
	require.NoError(t, db.Pool.QueryRow(context.Background(), `
		WITH keys AS (
		  SELECT resource_id AS k, bool_and(attempt_count >= 10) AS poisoned_only,
		         (array_agg(id ORDER BY id) FILTER (WHERE attempt_count < 10))[1] AS first_id
		  FROM public.events WHERE sent_at IS NULL GROUP BY resource_id),
		firsts AS (
		  SELECT keys.*, t.next_attempt_at AS due FROM keys LEFT JOIN public.events t ON t.id = keys.first_id)
		SELECT count(*) FILTER (WHERE poisoned_only)::int,
		       count(*) FILTER (WHERE poisoned_only AND h.partition_key IS NOT NULL)::int,
		       count(*) FILTER (WHERE due > now())::int,
		       count(*) FILTER (WHERE due > now() AND (h.head_id IS DISTINCT FROM first_id OR h.parked_until IS DISTINCT FROM due))::int
		FROM firsts LEFT JOIN outbox.partition_heads h ON h.queue_id = $1 AND h.partition_key = firsts.k`, qid).
		Scan(&poisonedOnly, &poisonedWithHead, &waiting, &waitingWrong))
	keysOf := func(kind string) int {
		if kind == last {
			return rebuildBacklogKeys / 500
		}
		return rebuildBacklogKeys/500 - 1
	}
	// After the drain a key whose first row is poisoned has only that row left.
	require.Equal(t, keysOf("poisoned")+rebuildBacklogKeys/500, poisonedOnly, "the poisoned-only keys are pending")
	require.Zero(t, poisonedWithHead, "no poisoned-only key has a head")
	require.Equal(t, keysOf("future")+rebuildBacklogKeys/500, waiting, "the keys whose first row is due later are pending")
	require.Zero(t, waitingWrong, "each key whose first row is due later has its head at that row, parked until it is due")
}
