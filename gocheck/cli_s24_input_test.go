package gocheck

import (
	"context"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pgdrain/pgdrain/cmd/pgdrain/cli"
	"github.com/pgdrain/pgdrain/internal/testdb"
)

// cliPoison poisons the heads of public.cli_events that ids names (claimed, then a permanent
// failure recorded with errText).
func cliPoison(t *testing.T, db *testdb.DB, errText string, ids ...int64) {
	t.Helper()
	ctx := context.Background()
	rows, err := db.Pool.Query(ctx, `SELECT id, lease_token::text FROM outbox.claim_batch('public.cli_events', 10, '5 minutes')`)
	require.NoError(t, err)
	tokens := map[int64]string{}
	for rows.Next() {
		var id int64
		var tok string
		require.NoError(t, rows.Scan(&id, &tok))
		tokens[id] = tok
	}
	require.NoError(t, rows.Err())
	for _, id := range ids {
		require.Contains(t, tokens, id, "row %d is a head", id)
		cliExec(t, db.Pool, `SELECT outbox.apply_result('public.cli_events', $1, $2::uuid, 'permanent', $3)`, id, tokens[id], errText)
	}
}

// `pgdrain dismiss QUEUE 3 3` names one row twice: it dismisses that row and says so, exit 0. It
// said "dismissed 1 of 2 row(s) ...; the others are not poisoned (any more)" and exited 1, so a
// script took a done dismissal for one left undone (the console counts each id once already).
func TestCLI_DismissCountsARowNamedTwiceOnce(t *testing.T) {
	t.Parallel()
	db := cliFixture(t)
	cliPoison(t, db, "malformed", 3)
	var res struct {
		IDs       []int64 `json:"ids"`
		Dismissed int64   `json:"dismissed"`
	}
	runCLIJSON(t, cli.ExitOK, &res, "--dsn", db.URL, "dismiss", "public.cli_events", "3", "3", "--reason", "bad data")
	require.Equal(t, []int64{3}, res.IDs)
	require.Equal(t, int64(1), res.Dismissed)

	cliPoison(t, db, "malformed", 6)
	text := runCLI(t, "--dsn", db.URL, "dismiss", "public.cli_events", "6", "6", "6", "--reason", "bad data")
	require.Equal(t, cli.ExitOK, text.code, "stdout %q stderr %q", text.stdout, text.stderr)
	require.Contains(t, text.stdout, "dismissed 1 of 1 row(s)")
	require.NotContains(t, text.stdout, "the others")
}

// docs/console.md says to raise --refresh on a large backlog; `pgdrain web --refresh 8m` (above half
// of the console's 15 minutes of history) connected, then exited 2 with "web: History must be at
// least two Refresh intervals (16m0s), got 15m0s", an option pgdrain web does not have. It serves.
func TestWeb_ARefreshOfSeveralMinutesServes(t *testing.T) {
	db := cliFixture(t)
	c := runWeb(t, "--dsn", db.URL, "--refresh", "8m")
	code, page := c.get("/")
	require.Equal(t, http.StatusOK, code, page)
	require.Contains(t, page, "public.cli_events")
}
