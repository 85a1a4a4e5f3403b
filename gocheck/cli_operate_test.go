package gocheck

import (
	"context"
	"net/url"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pgdrain/pgdrain/cmd/pgdrain/cli"
)

// An operator (a login in pgdrain_operator only) skips a wedged head, retries a backing-off one
// now and dismisses a poisoned row with the CLI (issue 30 item 3), each fenced by the attempt
// count it saw: a stale one leaves the row alone and exits 1. `pgdrain actions` lists what was
// done, by whom and why.
func TestCLI_OperatorSkipsRetriesAndDismissesFenced(t *testing.T) {
	t.Parallel()
	db := cliFixture(t)
	ctx := context.Background()
	operatorURL := loginURL(t, db, "pgdrain_operator")
	u, err := url.Parse(operatorURL)
	require.NoError(t, err)
	login := u.User.Username()

	// Heads: k1 -> 1, k2 -> 2, k0 -> 3. 1 and 2 fail transiently and back off for an hour.
	rows, err := db.Pool.Query(ctx, `SELECT id, lease_token::text FROM outbox.claim_batch('public.cli_events', 10)`)
	require.NoError(t, err)
	tokens := map[int64]string{}
	for rows.Next() {
		var id int64
		var tok string
		require.NoError(t, rows.Scan(&id, &tok))
		tokens[id] = tok
	}
	require.NoError(t, rows.Err())
	for id, tok := range tokens {
		if id == 3 {
			cliExec(t, db.Pool, `SELECT outbox.release('public.cli_events', $1, $2::uuid)`, id, tok)
			continue
		}
		cliExec(t, db.Pool, `SELECT outbox.apply_result('public.cli_events', $1, $2::uuid, 'transient', '503',
			clock_timestamp() + interval '1 hour')`, id, tok)
	}

	type result struct {
		Skipped   *bool `json:"skipped"`
		Retried   *bool `json:"retried"`
		Dismissed int64 `json:"dismissed"`
	}
	var r result
	runCLIJSON(t, cli.ExitProblems, &r, "skip", "public.cli_events", "1", "--attempts", "0", "--reason", "peer rejects it", "--dsn", operatorURL)
	require.False(t, *r.Skipped, "a stale attempt count leaves the row alone")
	out := runCLI(t, "skip", "public.cli_events", "1", "--attempts", "0", "--reason", "peer rejects it", "--dsn", operatorURL)
	require.Equal(t, cli.ExitProblems, out.code)
	require.Contains(t, out.stdout, "row 1 of public.cli_events was not skipped")

	runCLIJSON(t, cli.ExitOK, &r, "skip", "public.cli_events", "1", "--attempts", "1", "--reason", "peer rejects it", "--dsn", operatorURL)
	require.True(t, *r.Skipped)
	var next int64
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT id FROM outbox.claim_batch('public.cli_events', 10) WHERE partition_key = 'k1'`).Scan(&next))
	require.EqualValues(t, 4, next, "k1 moves on past the skipped head")

	out = runCLI(t, "retry", "public.cli_events", "2", "--attempts", "1", "--dsn", operatorURL)
	require.Equal(t, cli.ExitOK, out.code, out.stderr)
	require.Contains(t, out.stdout, "retried row 2 of public.cli_events")
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT id FROM outbox.claim_batch('public.cli_events', 10) WHERE partition_key = 'k2'`).Scan(&next))
	require.EqualValues(t, 2, next, "the retried row is claimed at once")

	runCLIJSON(t, cli.ExitProblems, &r, "dismiss", "public.cli_events", "1", "3", "--reason", "obsolete", "--dsn", operatorURL)
	require.EqualValues(t, 1, r.Dismissed, "only the poisoned row is dismissed")
	var poisoned []any
	runCLIJSON(t, cli.ExitOK, &poisoned, "poisoned", "public.cli_events", "--dsn", operatorURL)
	require.Empty(t, poisoned, "a dismissed row is no longer listed as poisoned")

	var log []struct {
		Action       string  `json:"action"`
		ID           int64   `json:"id"`
		AttemptCount int     `json:"attempt_count"`
		Reason       *string `json:"reason"`
		ActedBy      string  `json:"acted_by"`
		ActedAt      string  `json:"acted_at"`
	}
	runCLIJSON(t, cli.ExitOK, &log, "actions", "public.cli_events", "--dsn", operatorURL)
	require.Len(t, log, 3)
	var got []string
	for _, a := range log {
		require.Equal(t, login, a.ActedBy)
		require.Regexp(t, `Z$`, a.ActedAt)
		reason := "-"
		if a.Reason != nil {
			reason = *a.Reason
		}
		got = append(got, strings.Join([]string{a.Action, reason}, ":"))
	}
	require.Equal(t, []string{"dismiss:obsolete", "retry:-", "poison:peer rejects it"}, got, "newest first")

	for _, args := range [][]string{
		{"skip", "public.cli_events", "4", "--reason", "x"},
		{"skip", "public.cli_events", "4", "--attempts", "0", "--reason", "  "},
		{"retry", "public.cli_events", "x", "--attempts", "0"},
		{"dismiss", "public.cli_events", "1"},
	} {
		out := runCLI(t, append(args, "--dsn", operatorURL)...)
		require.Equal(t, cli.ExitUsage, out.code, "pgdrain %v: %s", args, out.stderr)
	}
}
