package gocheck

import (
	"bytes"
	"context"
	"encoding/json"
	"net/url"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/pgdrain/pgdrain/cmd/pgdrain/cli"
	"github.com/pgdrain/pgdrain/internal/testdb"
)

// cliResult is what one in-process run of the pgdrain command printed and returned.
type cliResult struct {
	code   int
	stdout string
	stderr string
}

func runCLI(t *testing.T, args ...string) cliResult {
	t.Helper()
	var out, errOut bytes.Buffer
	code := cli.Run(context.Background(), args, &out, &errOut)
	return cliResult{code: code, stdout: out.String(), stderr: errOut.String()}
}

// runCLIJSON runs the command with --json, requires exit code want and decodes stdout into v.
func runCLIJSON(t *testing.T, want int, v any, args ...string) {
	t.Helper()
	r := runCLI(t, append([]string{"--json"}, args...)...)
	require.Equal(t, want, r.code, "pgdrain %v: stdout %q stderr %q", args, r.stdout, r.stderr)
	require.NoError(t, json.Unmarshal([]byte(r.stdout), v), "pgdrain %v printed %q", args, r.stdout)
}

func cliExec(t *testing.T, pool *pgxpool.Pool, sql string, args ...any) {
	t.Helper()
	_, err := pool.Exec(context.Background(), sql, args...)
	require.NoError(t, err, sql)
}

// cliFixture: a partitioned queue public.cli_events with 3 keys x 4 rows (ids 1..12, key k<id%3>),
// and an unpartitioned queue public.cli_jobs.
func cliFixture(t *testing.T) *testdb.DB {
	t.Helper()
	db := testdb.New(t)
	cliExec(t, db.Pool, `SELECT outbox.create_queue('public.cli_events', 'account_id')`)
	cliExec(t, db.Pool, `SELECT outbox.create_queue('public.cli_jobs')`)
	cliExec(t, db.Pool, `INSERT INTO public.cli_events (event_type, payload, account_id)
		SELECT 'e', pg_catalog.jsonb_build_object('n', g), 'k' || (g % 3) FROM generate_series(1, 12) g`)
	return db
}

func TestCLI_QueuesListsTheRegistry(t *testing.T) {
	t.Parallel()
	db := cliFixture(t)
	var queues []struct {
		Queue           string  `json:"queue"`
		PartitionColumn *string `json:"partition_column"`
		MaxAttempts     int     `json:"max_attempts"`
		BackoffMin      float64 `json:"backoff_min_seconds"`
		BackoffMax      float64 `json:"backoff_max_seconds"`
		PermanentPolicy string  `json:"permanent_policy"`
		Channel         string  `json:"channel"`
	}
	runCLIJSON(t, cli.ExitOK, &queues, "--dsn", db.URL, "queues")
	require.Len(t, queues, 2)
	require.Equal(t, "public.cli_events", queues[0].Queue)
	require.Equal(t, "account_id", *queues[0].PartitionColumn)
	require.Equal(t, "public.cli_jobs", queues[1].Queue)
	require.Nil(t, queues[1].PartitionColumn)
	require.Equal(t, 10, queues[1].MaxAttempts)
	require.Equal(t, 1.0, queues[1].BackoffMin)
	require.Equal(t, 30.0, queues[1].BackoffMax)
	require.Equal(t, "poison", queues[1].PermanentPolicy)
	require.Equal(t, "pgdrain_public_cli_jobs", queues[1].Channel)

	text := runCLI(t, "queues", "--dsn", db.URL)
	require.Equal(t, cli.ExitOK, text.code, text.stderr)
	require.Contains(t, text.stdout, "public.cli_events")
	require.Contains(t, text.stdout, "account_id")
}

func TestCLI_StatsWedgedAndRequeueFollowTheRows(t *testing.T) {
	t.Parallel()
	db := cliFixture(t)
	ctx := context.Background()

	// Claim the three heads (ids 1, 2, 3); poison id 3 (key k0), back off id 1 (key k1), leave id 2 leased.
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
	require.Len(t, tokens, 3, "one head per key")
	cliExec(t, db.Pool, `SELECT outbox.apply_result('public.cli_events', 3, $1::uuid, 'permanent', 'malformed')`, tokens[3])
	cliExec(t, db.Pool, `SELECT outbox.apply_result('public.cli_events', 1, $1::uuid, 'transient', 'peer 503')`, tokens[1])

	type stats struct {
		Pending    int64    `json:"pending"`
		Ready      int64    `json:"ready"`
		Leased     int64    `json:"leased"`
		BackingOff int64    `json:"backing_off"`
		Poisoned   int64    `json:"poisoned"`
		OldestAge  *float64 `json:"oldest_pending_age_seconds"`
	}
	var s stats
	runCLIJSON(t, cli.ExitOK, &s, "stats", "cli_events", "--dsn", db.URL)
	require.Equal(t, stats{Pending: 11, Ready: 9, Leased: 1, BackingOff: 1, Poisoned: 1, OldestAge: s.OldestAge}, s)
	require.NotNil(t, s.OldestAge)

	type wedged struct {
		PartitionKey  string  `json:"partition_key"`
		HeadID        int64   `json:"head_id"`
		Attempts      int     `json:"head_attempt_count"`
		HeadLastError *string `json:"head_last_error"`
		Pending       int64   `json:"pending"`
		Reason        string  `json:"reason"`
	}
	var w []wedged
	runCLIJSON(t, cli.ExitProblems, &w, "wedged", "public.cli_events", "--older-than", "0s", "--limit", "10", "--dsn", db.URL)
	byKey := map[string]wedged{}
	for _, x := range w {
		byKey[x.PartitionKey] = x
	}
	require.Len(t, byKey, 3)
	require.Equal(t, int64(1), byKey["k1"].HeadID)
	require.Equal(t, "peer 503", *byKey["k1"].HeadLastError)
	require.Contains(t, byKey["k1"].Reason, "backing off until")
	require.Contains(t, byKey["k2"].Reason, "leased until")
	require.Equal(t, int64(6), byKey["k0"].HeadID, "the poisoned id 3 is skipped: k0's head is its next row")
	require.Equal(t, int64(3), byKey["k0"].Pending)

	var none []wedged
	runCLIJSON(t, cli.ExitOK, &none, "wedged", "public.cli_events", "--older-than", "1d", "--dsn", db.URL)
	require.Empty(t, none)

	var requeued struct {
		Requeued int64 `json:"requeued"`
	}
	runCLIJSON(t, cli.ExitOK, &requeued, "requeue", "public.cli_events", "4", "--dsn", db.URL)
	require.Equal(t, int64(0), requeued.Requeued, "id 4 is not poisoned")
	runCLIJSON(t, cli.ExitOK, &requeued, "requeue", "public.cli_events", "3", "--dsn", db.URL)
	require.Equal(t, int64(1), requeued.Requeued)
	var attempts int
	var atTail bool
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT attempt_count, id > (SELECT max(id) FROM public.cli_events WHERE id <> e.id)
		FROM public.cli_events e WHERE last_error = 'malformed'`).Scan(&attempts, &atTail))
	require.Equal(t, 0, attempts)
	require.True(t, atTail, "a requeued row goes to the tail of its key, with a new id")
	runCLIJSON(t, cli.ExitOK, &s, "stats", "cli_events", "--dsn", db.URL)
	require.Equal(t, int64(0), s.Poisoned)
	require.Equal(t, int64(12), s.Pending)
}

func TestCLI_PurgeDeletesOldSentRowsInChunks(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	cliExec(t, db.Pool, `SELECT outbox.create_queue('public.cli_purge')`)
	// 25 rows sent 8 days ago, 5 sent just now, 3 pending.
	cliExec(t, db.Pool, `INSERT INTO public.cli_purge (event_type, payload, sent_at)
		SELECT 'e', '{}', CASE WHEN g <= 25 THEN now() - interval '8 days' WHEN g <= 30 THEN now() END
		FROM generate_series(1, 33) g`)

	type purged struct {
		Deleted int64 `json:"deleted"`
		Chunks  int   `json:"chunks"`
	}
	var p purged
	runCLIJSON(t, cli.ExitOK, &p, "purge", "public.cli_purge", "--older-than", "7d", "--chunk", "10", "--max-rows", "7", "--dsn", db.URL)
	require.Equal(t, purged{Deleted: 7, Chunks: 1}, p)
	runCLIJSON(t, cli.ExitOK, &p, "purge", "public.cli_purge", "--older-than", "7d", "--chunk", "10", "--dsn", db.URL)
	require.Equal(t, purged{Deleted: 18, Chunks: 2}, p)

	var left, pending int
	require.NoError(t, db.Pool.QueryRow(context.Background(),
		`SELECT count(*), count(*) FILTER (WHERE sent_at IS NULL) FROM public.cli_purge`).Scan(&left, &pending))
	require.Equal(t, 8, left, "the 5 recent sent rows and the 3 pending rows stay")
	require.Equal(t, 3, pending)

	text := runCLI(t, "purge", "public.cli_purge", "--dsn", db.URL)
	require.Equal(t, cli.ExitOK, text.code, text.stderr)
	require.Contains(t, text.stdout, "deleted 0 sent row(s)")
}

func TestCLI_CheckNamesEveryProblem(t *testing.T) {
	t.Parallel()
	db := cliFixture(t)
	type report struct {
		OK       bool `json:"ok"`
		Problems []struct {
			Check   string  `json:"check"`
			Problem string  `json:"problem"`
			Name    *string `json:"name"`
		} `json:"problems"`
	}
	var r report
	runCLIJSON(t, cli.ExitOK, &r, "check", "public.cli_events", "--dsn", db.URL)
	require.True(t, r.OK)
	require.Empty(t, r.Problems)
	runCLIJSON(t, cli.ExitOK, &r, "check", "cli_jobs", "--dsn", db.URL)
	require.True(t, r.OK)

	cliExec(t, db.Pool, `CREATE INDEX cli_decoy ON public.cli_events (created_at) WHERE sent_at IS NULL`)
	cliExec(t, db.Pool, `ALTER TABLE public.cli_events RESET (autovacuum_analyze_scale_factor)`)
	cliExec(t, db.Pool, `ALTER TABLE public.cli_events SET (autovacuum_vacuum_scale_factor = 0.2)`)
	cliExec(t, db.Pool, `ALTER TABLE public.cli_events DISABLE TRIGGER pgdrain_heads`)
	cliExec(t, db.Pool, `DROP TRIGGER pgdrain_snapshot ON public.cli_events`)
	cliExec(t, db.Pool, `DROP TRIGGER pgdrain_notify ON public.cli_jobs`)
	runCLIJSON(t, cli.ExitProblems, &r, "check", "public.cli_events", "--dsn", db.URL)
	require.False(t, r.OK)
	got := map[string]string{}
	for _, p := range r.Problems {
		got[p.Check+" "+p.Problem] = *p.Name
	}
	require.Equal(t, map[string]string{
		"indexes decoy":       "cli_decoy",
		"autovacuum not set":  "autovacuum_analyze_scale_factor",
		"autovacuum too lazy": "autovacuum_vacuum_scale_factor",
		"triggers disabled":   "pgdrain_heads",
		"triggers missing":    "pgdrain_snapshot",
	}, got, "a partitioned queue has no NOTIFY trigger to miss: its commit step notifies")
	runCLIJSON(t, cli.ExitProblems, &r, "check", "cli_jobs", "--dsn", db.URL)
	got = map[string]string{}
	for _, p := range r.Problems {
		got[p.Check+" "+p.Problem] = *p.Name
	}
	require.Equal(t, map[string]string{"triggers missing": "pgdrain_notify"}, got)

	text := runCLI(t, "check", "public.cli_events", "--dsn", db.URL)
	require.Equal(t, cli.ExitProblems, text.code)
	require.Contains(t, text.stdout, "cli_decoy")
	require.Contains(t, text.stdout, "ENABLE TRIGGER pgdrain_heads")

	cliExec(t, db.Pool, `SELECT outbox.create_queue('public.cli_events', 'account_id')`)
	cliExec(t, db.Pool, `ALTER TABLE outbox.commit_hooks DISABLE TRIGGER pgdrain_commit`)
	runCLIJSON(t, cli.ExitProblems, &r, "check", "public.cli_events", "--dsn", db.URL)
	var triggers []string
	for _, p := range r.Problems {
		if p.Check == "triggers" {
			triggers = append(triggers, p.Problem+" "+*p.Name)
		}
	}
	require.Equal(t, []string{"disabled outbox.pgdrain_commit"}, triggers, "create_queue restored the others")
}

func TestCLI_ExitCodes(t *testing.T) {
	t.Parallel()
	db := cliFixture(t)
	for _, tc := range []struct {
		name   string
		args   []string
		code   int
		stderr string
	}{
		{"no command", nil, cli.ExitUsage, "no command given"},
		{"unknown command", []string{"--dsn", db.URL, "frobnicate"}, cli.ExitUsage, `unknown command "frobnicate"`},
		{"missing queue", []string{"--dsn", db.URL, "stats"}, cli.ExitUsage, "stats: wrong number of arguments (0)"},
		{"extra argument", []string{"--dsn", db.URL, "check", "a", "b"}, cli.ExitUsage, "check: wrong number of arguments (2)"},
		{"bad id", []string{"--dsn", db.URL, "requeue", "public.cli_events", "x1"}, cli.ExitUsage, `ID must be a positive integer, got "x1"`},
		{"bad age", []string{"--dsn", db.URL, "purge", "public.cli_events", "--older-than", "7 days"}, cli.ExitUsage, "want a duration like 90s, 5m, 12h or 7d"},
		{"bad limit", []string{"--dsn", db.URL, "wedged", "public.cli_events", "--limit", "0"}, cli.ExitUsage, "--limit must be between 1 and 10000, got 0"},
		{"unknown flag", []string{"--dsn", db.URL, "stats", "q", "--frob"}, cli.ExitUsage, "flag provided but not defined: -frob"},
		{"unknown queue", []string{"--dsn", db.URL, "stats", "public.nope"}, cli.ExitUsage, "queue public.nope is not registered (call outbox.create_queue first) (SQLSTATE 42P01)"},
		{"requeue without ids", []string{"--dsn", db.URL, "requeue", "public.cli_events"}, cli.ExitUsage, "give the ids to requeue, --key K for the poisoned rows of a key, or --all"},
		{"requeue ids and --all", []string{"--dsn", db.URL, "requeue", "public.cli_events", "3", "--all"}, cli.ExitUsage, "give ids, --key or --all, only one of them"},
		{"wedged on unpartitioned", []string{"--dsn", db.URL, "wedged", "public.cli_jobs"}, cli.ExitDatabase, "queue public.cli_jobs has no partition column (SQLSTATE 22023)"},
		{"unreachable server", []string{"--dsn", "postgres://nobody@127.0.0.1:1/x?sslmode=disable&connect_timeout=2", "queues"}, cli.ExitDatabase, "connecting to database"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := runCLI(t, tc.args...)
			require.Equal(t, tc.code, r.code, "stdout %q stderr %q", r.stdout, r.stderr)
			require.Contains(t, r.stderr, tc.stderr)
			require.Empty(t, r.stdout)
		})
	}
	help := runCLI(t, "help")
	require.Equal(t, cli.ExitOK, help.code)
	require.Contains(t, help.stdout, "exit codes: 0 ok, 1 problems found, 2 usage error (an unknown queue too), 3 database error")
	version := runCLI(t, "--version")
	require.Equal(t, cli.ExitOK, version.code)
	require.True(t, strings.HasPrefix(version.stdout, "pgdrain "), version.stdout)
}

// Without --dsn and DATABASE_URL, pgdrain connects like psql: the PG* environment and libpq's
// defaults.
func TestCLI_UsesThePGEnvironment(t *testing.T) {
	db := cliFixture(t)
	u, err := url.Parse(db.URL)
	require.NoError(t, err)
	t.Setenv("DATABASE_URL", "")
	t.Setenv("PGHOST", u.Hostname())
	t.Setenv("PGPORT", u.Port())
	t.Setenv("PGUSER", u.User.Username())
	if pw, ok := u.User.Password(); ok {
		t.Setenv("PGPASSWORD", pw)
	}
	t.Setenv("PGDATABASE", strings.TrimPrefix(u.Path, "/"))
	t.Setenv("PGSSLMODE", u.Query().Get("sslmode"))
	r := runCLI(t, "queues")
	require.Equal(t, cli.ExitOK, r.code, "stderr %q", r.stderr)
	require.Contains(t, r.stdout, "public.cli_events")
}

// purge --dry-run, as pgdrain_operator, reports exactly what the purge would delete (same age,
// same --max-rows bound) and deletes nothing; the real purge then deletes that many.
func TestCLI_PurgeDryRunDeletesNothing(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	cliExec(t, db.Pool, `SELECT outbox.create_queue('public.cli_purge')`)
	// 25 rows sent 8 days ago, 5 sent just now, 3 pending.
	cliExec(t, db.Pool, `INSERT INTO public.cli_purge (event_type, payload, sent_at)
		SELECT 'e', '{}', CASE WHEN g <= 25 THEN now() - interval '8 days' WHEN g <= 30 THEN now() END
		FROM generate_series(1, 33) g`)
	operator := loginURL(t, db, "pgdrain_operator")
	rows := func() int {
		var n int
		require.NoError(t, db.Pool.QueryRow(context.Background(), `SELECT count(*) FROM public.cli_purge`).Scan(&n))
		return n
	}
	type dryRun struct {
		DryRun      bool  `json:"dry_run"`
		WouldDelete int64 `json:"would_delete"`
		Chunks      int   `json:"chunks"`
	}
	var d dryRun
	runCLIJSON(t, cli.ExitOK, &d, "purge", "public.cli_purge", "--dry-run", "--chunk", "10", "--dsn", operator)
	require.Equal(t, dryRun{DryRun: true, WouldDelete: 25, Chunks: 3}, d)
	require.Equal(t, 33, rows(), "a dry run deletes nothing")
	runCLIJSON(t, cli.ExitOK, &d, "purge", "public.cli_purge", "--dry-run", "--max-rows", "7", "--dsn", operator)
	require.Equal(t, dryRun{DryRun: true, WouldDelete: 7, Chunks: 1}, d, "bounded by --max-rows like the purge")
	runCLIJSON(t, cli.ExitOK, &d, "purge", "public.cli_purge", "--dry-run", "--older-than", "0s", "--dsn", operator)
	require.Equal(t, int64(30), d.WouldDelete, "every sent row, never a pending one")
	require.Equal(t, 33, rows())

	text := runCLI(t, "purge", "public.cli_purge", "--dry-run", "--dsn", operator)
	require.Equal(t, cli.ExitOK, text.code, text.stderr)
	require.Contains(t, text.stdout, "would delete 25 sent row(s) of public.cli_purge")
	require.Contains(t, text.stdout, "nothing deleted")
	require.Equal(t, 33, rows())

	var p struct {
		Deleted int64 `json:"deleted"`
	}
	runCLIJSON(t, cli.ExitOK, &p, "purge", "public.cli_purge", "--dsn", operator)
	require.Equal(t, int64(25), p.Deleted, "the purge deletes what the dry run counted")
	require.Equal(t, 8, rows())
}

// With --json every error is one JSON object on stderr, nothing on stdout, and the exit code is
// the one the text mode returns.
func TestCLI_JSONErrors(t *testing.T) {
	t.Parallel()
	db := cliFixture(t)
	operator := loginURL(t, db, "pgdrain_operator")
	type errorReport struct {
		Error    string `json:"error"`
		Code     string `json:"code"`
		ExitCode int    `json:"exit_code"`
		SQLState string `json:"sqlstate"`
	}
	for _, tc := range []struct {
		name string
		args []string
		want errorReport
	}{
		{"no command", []string{"--json"}, errorReport{"no command given", "usage", cli.ExitUsage, ""}},
		{"unknown flag after --json", []string{"--json", "--dsn", operator, "stats", "q", "--frob"},
			errorReport{"flag provided but not defined: -frob", "usage", cli.ExitUsage, ""}},
		{"unknown flag before --json", []string{"--frob", "--json", "stats", "q"},
			errorReport{"flag provided but not defined: -frob", "usage", cli.ExitUsage, ""}},
		{"--json after the command", []string{"--dsn", operator, "stats", "--json"},
			errorReport{"stats: wrong number of arguments (0)", "usage", cli.ExitUsage, ""}},
		{"bad flag value", []string{"--json", "--dsn", operator, "wedged", "public.cli_events", "--limit", "0"},
			errorReport{"--limit must be between 1 and 10000, got 0", "usage", cli.ExitUsage, ""}},
		{"unknown queue", []string{"--json", "--dsn", operator, "stats", "public.nope"},
			errorReport{"queue public.nope is not registered (call outbox.create_queue first) (SQLSTATE 42P01)",
				"unknown_queue", cli.ExitUsage, "42P01"}},
		{"refused argument", []string{"--json", "--dsn", operator, "wedged", "public.cli_jobs"},
			errorReport{"queue public.cli_jobs has no partition column (SQLSTATE 22023)", "database", cli.ExitDatabase, "22023"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := runCLI(t, tc.args...)
			require.Equal(t, tc.want.ExitCode, r.code, "stdout %q stderr %q", r.stdout, r.stderr)
			require.Empty(t, r.stdout)
			var got errorReport
			dec := json.NewDecoder(strings.NewReader(r.stderr))
			dec.DisallowUnknownFields()
			require.NoError(t, dec.Decode(&got), "stderr %q", r.stderr)
			require.False(t, dec.More(), "one JSON object: %q", r.stderr)
			require.Equal(t, tc.want.Code, got.Code)
			require.Equal(t, tc.want.SQLState, got.SQLState)
			require.Contains(t, got.Error, tc.want.Error)
			require.Equal(t, tc.want.ExitCode, got.ExitCode)
		})
	}
	r := runCLI(t, "--json", "--dsn", "postgres://nobody@127.0.0.1:1/x?sslmode=disable&connect_timeout=2", "queues")
	require.Equal(t, cli.ExitDatabase, r.code)
	var got errorReport
	require.NoError(t, json.Unmarshal([]byte(r.stderr), &got), r.stderr)
	require.Equal(t, "database", got.Code)
	require.Contains(t, got.Error, "connecting to database")
}
