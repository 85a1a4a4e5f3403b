package gocheck

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"
)

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
