package gocheck

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pgdrain/pgdrain/internal/testdb"
)

// Test_PartitionHeads_RebuiltAfterCrashReset: outbox.partition_heads is UNLOGGED, so crash
// recovery (or promoting a standby) leaves it empty. Emptying both unlogged tables is exactly that
// state. The next claim must rebuild every partition's head from the queue table: nothing pending
// is stranded, per-key order holds, and a leased head stays leased (its partition is not handed
// out twice).
func Test_PartitionHeads_RebuiltAfterCrashReset(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testdb.New(t)
	exec(t, db.Pool, `SELECT outbox.create_queue('public.crashed', 'resource_id')`)
	exec(t, db.Pool, `INSERT INTO public.crashed (event_type, payload, resource_id)
		SELECT 'e', '{}', 'k' || (g % 50) FROM generate_series(1, 500) g`)

	var leasedID int64
	var leasedKey string
	require.NoError(t, db.Pool.QueryRow(ctx,
		`SELECT id, partition_key FROM outbox.claim_batch('public.crashed', 1)`).Scan(&leasedID, &leasedKey))

	exec(t, db.Pool, `TRUNCATE outbox.partition_heads, outbox.partition_heads_built`)
	// A producer writing after the restart, before any claim.
	exec(t, db.Pool, `INSERT INTO public.crashed (event_type, payload, resource_id) VALUES ('late', '{}', 'k-new')`)

	delivered := map[string][]int64{}
	for {
		rows, err := db.Pool.Query(ctx, `SELECT id, partition_key, lease_token FROM outbox.claim_batch('public.crashed', 100)`)
		require.NoError(t, err)
		type claimed struct {
			id    int64
			key   string
			token string
		}
		var batch []claimed
		for rows.Next() {
			var c claimed
			require.NoError(t, rows.Scan(&c.id, &c.key, &c.token))
			batch = append(batch, c)
		}
		require.NoError(t, rows.Err())
		if len(batch) == 0 {
			break
		}
		seen := map[string]bool{}
		for _, c := range batch {
			require.False(t, seen[c.key], "two rows of partition %s in one batch", c.key)
			seen[c.key] = true
			require.NotEqual(t, leasedKey, c.key, "partition %s was handed out while its head is leased", c.key)
			exec(t, db.Pool, `SELECT outbox.apply_result('public.crashed', $1, $2::uuid, 'sent')`, c.id, c.token)
			delivered[c.key] = append(delivered[c.key], c.id)
		}
	}
	total := 0
	for key, ids := range delivered {
		require.IsIncreasing(t, ids, "partition %s delivered out of id order", key)
		total += len(ids)
	}
	require.Equal(t, 500-10+1, total, "every row but the leased partition's 10 is delivered, and the late one")
	require.Len(t, delivered["k-new"], 1, "the row written after the reset is delivered")

	var pending int
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT pending FROM outbox.stats('public.crashed')`).Scan(&pending))
	require.Equal(t, 10, pending, "only the leased partition is left")
}
