package gocheck

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"
)

// outbox.repair walks a queue's keys once: its work per key must not grow with the number of keys.
// Before migration 00014 the planner joined the key walk to a materialized copy of every head of
// the queue, comparing each key with each head (16,666 keys: 20 s, run by every drainer when it
// starts). Measured as plan work (rows produced and discarded by every node, auto_explain), as
// pgdrain_operator, on queues of 1,000 and 8,000 keys with about six pending rows each.
func TestRepair_WorkGrowsWithKeysNotKeysSquared(t *testing.T) {
	t.Parallel()
	db := newPlanDB(t)
	ctx := context.Background()
	perKey := map[string]map[int]float64{"heads not analyzed": {}, "heads analyzed": {}}
	for _, keys := range []int{1000, 8000} {
		queue := newQueue(t, db.Pool, fmt.Sprintf("public.repair_%d", keys), true)
		fillInterleaved(t, db.Pool, queue, keys*rowsPerKey, keys)
		// The queue table analyzed, the heads not (yet): as after a fill, before autovacuum came by.
		_, err := db.Pool.Exec(ctx, "ANALYZE "+queue)
		require.NoError(t, err)
		_, err = db.Pool.Exec(ctx, "SELECT count(*) FROM outbox.claim_batch($1, 1)", queue) // builds the heads
		require.NoError(t, err)

		conn, work := planWorkConn(t, db, "pgdrain_operator")
		for _, stats := range []string{"heads not analyzed", "heads analyzed"} {
			if stats == "heads analyzed" {
				_, err = db.Pool.Exec(ctx, "ANALYZE outbox.partition_heads")
				require.NoError(t, err)
			}
			var found int
			require.NoError(t, conn.QueryRow(ctx, "SELECT count(*) FROM outbox.repair($1, true)", queue).Scan(&found))
			require.Zero(t, found, "a healthy queue has nothing to repair")
			w := work()
			require.Positive(t, w, "auto_explain reported no plan")
			perKey[stats][keys] = w / float64(keys)
			t.Logf("%d keys, %s: plan work %.0f rows (%.1f per key)", keys, stats, w, w/float64(keys))
		}
	}
	for stats, byKeys := range perKey {
		requireWorkPerKeyFlat(t, "repair, "+stats, byKeys)
	}
}
