package gocheck

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pgdrain/pgdrain/cmd/pgdrain/cli"
)

// `pgdrain poisoned QUEUE` lists poisoned ids (all, or one key's), exiting 1 while there are any;
// `requeue --key` moves exactly that key's poisoned rows to its tail without knowing their ids.
func TestCLI_PoisonedListsIdsAndRequeueKeyNeedsNone(t *testing.T) {
	t.Parallel()
	db := cliFixture(t)
	ctx := context.Background()

	// Poison the heads of k0 (id 3) and k1 (id 1), then k1's next head (id 4).
	poison := func(want int) {
		t.Helper()
		rows, err := db.Pool.Query(ctx, `SELECT id, lease_token::text FROM outbox.claim_batch('public.cli_events', 10, '5 minutes')`)
		require.NoError(t, err)
		claimed := map[int64]string{}
		for rows.Next() {
			var id int64
			var tok string
			require.NoError(t, rows.Scan(&id, &tok))
			claimed[id] = tok
		}
		require.NoError(t, rows.Err())
		n := 0
		for id, tok := range claimed {
			if id == 1 || id == 3 || id == 4 {
				cliExec(t, db.Pool, `SELECT outbox.apply_result('public.cli_events', $1, $2::uuid, 'permanent', 'peer 400')`, id, tok)
				n++
			} else {
				cliExec(t, db.Pool, `SELECT outbox.release_lease('public.cli_events', $1)`, id)
			}
		}
		require.Equal(t, want, n)
	}
	poison(2) // ids 1 (k1) and 3 (k0); k2's head 2 goes back
	poison(1) // id 4, k1's next head
	type row struct {
		ID           int64   `json:"id"`
		PartitionKey *string `json:"partition_key"`
		LastError    *string `json:"last_error"`
		CreatedAt    string  `json:"created_at"`
	}
	var all []row
	runCLIJSON(t, cli.ExitProblems, &all, "poisoned", "public.cli_events", "--dsn", db.URL)
	ids := []int64{}
	for _, r := range all {
		ids = append(ids, r.ID)
		require.Equal(t, "peer 400", *r.LastError)
		require.Regexp(t, `^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z$`, r.CreatedAt, "RFC 3339 in UTC")
	}
	require.Equal(t, []int64{4, 3, 1}, ids, "newest first")

	var k1 []row
	runCLIJSON(t, cli.ExitProblems, &k1, "poisoned", "public.cli_events", "--key", "k1", "--dsn", db.URL)
	require.Len(t, k1, 2)
	require.Equal(t, []int64{4, 1}, []int64{k1[0].ID, k1[1].ID})

	var requeued struct {
		Requeued int64   `json:"requeued"`
		Key      string  `json:"key"`
		IDs      []int64 `json:"ids"`
	}
	runCLIJSON(t, cli.ExitOK, &requeued, "requeue", "public.cli_events", "--key", "k1", "--dsn", db.URL)
	require.Equal(t, int64(2), requeued.Requeued)
	require.Equal(t, []int64{1, 4}, requeued.IDs, "oldest first, so the key keeps their order")

	var left []row
	runCLIJSON(t, cli.ExitProblems, &left, "poisoned", "public.cli_events", "--dsn", db.URL)
	require.Len(t, left, 1)
	require.Equal(t, int64(3), left[0].ID, "k0's poisoned row stays")
	var none []row
	runCLIJSON(t, cli.ExitOK, &none, "poisoned", "public.cli_events", "--key", "k1", "--dsn", db.URL)
	require.Empty(t, none)

	r := runCLI(t, "--dsn", db.URL, "requeue", "public.cli_jobs", "--key", "x")
	require.Equal(t, cli.ExitUsage, r.code)
	require.Contains(t, r.stderr, "has no partition column")
}
