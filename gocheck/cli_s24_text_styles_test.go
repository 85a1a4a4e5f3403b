package gocheck

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/pgdrain/pgdrain/cmd/pgdrain/cli"
	"github.com/pgdrain/pgdrain/internal/testdb"
)

// textStyleSettings are the DateStyle and IntervalStyle a DBA may set for a role or a database
// that change how PostgreSQL writes times and intervals as text. A connection in exec or
// simple_protocol mode (docs/pgbouncer.md: behind PgBouncer) reads every result as text, and pgx
// parses only the ISO and postgres styles.
var textStyleSettings = []struct{ name, value string }{
	{"DateStyle", "SQL, DMY"},
	{"DateStyle", "German"},
	{"IntervalStyle", "sql_standard"},
	{"IntervalStyle", "postgres_verbose"},
	{"IntervalStyle", "iso_8601"},
}

// withQueryExecMode is dsn with pgx's default_query_exec_mode set to mode.
func withQueryExecMode(t *testing.T, dsn, mode string) string {
	t.Helper()
	u, err := url.Parse(dsn)
	require.NoError(t, err)
	q := u.Query()
	q.Set("default_query_exec_mode", mode)
	u.RawQuery = q.Encode()
	return u.String()
}

// textStyleFixture is cliFixture with what every command shows: a poisoned head (key k0), a head
// backing off (k1), a leased one (k2), all pending for ten minutes; sent rows eight days old; an
// operator action; a firing alert on a ladder. Then the login's DateStyle or IntervalStyle in this
// database is set (ALTER ROLE ... IN DATABASE), which every new session of it takes.
func textStyleFixture(t *testing.T, setting, value string) *testdb.DB {
	t.Helper()
	db := cliFixture(t)
	ctx := context.Background()
	cliExec(t, db.Pool, `UPDATE public.cli_events SET created_at = now() - interval '10 minutes'`)
	rows, err := db.Pool.Query(ctx, `SELECT id, lease_token::text FROM outbox.claim_batch('public.cli_events', 10, '2 hours')`)
	require.NoError(t, err)
	tokens := map[int64]string{}
	for rows.Next() {
		var id int64
		var tok string
		require.NoError(t, rows.Scan(&id, &tok))
		tokens[id] = tok
	}
	require.NoError(t, rows.Err())
	require.Len(t, tokens, 3)
	cliExec(t, db.Pool, `SELECT outbox.apply_result('public.cli_events', 3, $1::uuid, 'permanent', 'malformed')`, tokens[3])
	cliExec(t, db.Pool, `SELECT outbox.apply_result('public.cli_events', 1, $1::uuid, 'transient', 'peer 503')`, tokens[1])
	cliExec(t, db.Pool, `INSERT INTO public.cli_jobs (event_type, payload) SELECT 'old', '{}' FROM generate_series(1, 3)`)
	cliExec(t, db.Pool, `UPDATE public.cli_jobs SET sent_at = now() - interval '8 days', created_at = now() - interval '8 days'`)
	cliExec(t, db.Pool, `SELECT outbox.dismiss_poisoned('public.cli_events', ARRAY[999]::bigint[], 'nothing')`)
	var policy, alert string
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT alr.create_policy('on-call', '[
		{"delay": "0s", "channel": "slack", "target": "#ops"},
		{"delay": "1 day 2 hours", "channel": "sms", "target": "+15550100"}]')::text`).Scan(&policy))
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT alr.add_alert('api 5xx')::text`).Scan(&alert))
	cliExec(t, db.Pool, `SELECT alr.start_escalation($1::uuid, $2::uuid)`, alert, policy)
	cliExec(t, db.Pool, fmt.Sprintf(`ALTER ROLE CURRENT_USER IN DATABASE %s SET %s = %s`,
		pgx.Identifier{db.Name}.Sanitize(), setting, quoteLiteralForTest(value)))
	return db
}

func quoteLiteralForTest(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }

// sane reports whether a time the CLI printed is the fixture's (written within the last hour or
// eight days ago), not a misread one.
func saneTime(at time.Time) bool {
	return at.After(time.Now().Add(-9*24*time.Hour)) && at.Before(time.Now().Add(time.Minute))
}

// Every command of the CLI reads its results as text through a DSN with default_query_exec_mode
// exec or simple_protocol (docs/pgbouncer.md), whatever DateStyle or IntervalStyle the DBA gave the
// login role: no "invalid PostgreSQL date/time value" or "bad interval format", and every time it
// prints is the row's. `pgdrain fanout add` read the queue's backoff_min and backoff_max as
// intervals: under IntervalStyle postgres_verbose or iso_8601 (and sql_standard with a backoff of
// a day or more) it failed before creating the sink's queue.
func TestCLI_TextResultsUnderUnusualDateAndIntervalStyles(t *testing.T) {
	t.Parallel()
	for _, s := range textStyleSettings {
		for _, mode := range []string{"exec", "simple_protocol"} {
			t.Run(fmt.Sprintf("%s=%s/%s", s.name, s.value, mode), func(t *testing.T) {
				t.Parallel()
				db := textStyleFixture(t, s.name, s.value)
				ctx := context.Background()
				// A backoff_max of a day: sql_standard writes it "1 0:00:00".
				cliExec(t, db.Pool, `SELECT outbox.create_queue('public.cli_events', 'account_id', backoff_max => '1 day')`)
				dsn := withQueryExecMode(t, db.URL, mode)
				conn, err := pgx.Connect(ctx, dsn)
				require.NoError(t, err)
				var shown string
				require.NoError(t, conn.QueryRow(ctx, "SELECT pg_catalog.current_setting($1)", s.name).Scan(&shown))
				require.NoError(t, conn.Close(ctx))
				require.True(t, strings.HasPrefix(shown, s.value), "the role's setting is in force in a new session: %s", shown)

				// want -1: ExitOK or ExitProblems, whichever the rows say by then.
				run := func(want int, v any, args ...string) {
					t.Helper()
					r := runCLI(t, append([]string{"--dsn", dsn}, args...)...)
					if want == -1 {
						require.Contains(t, []int{cli.ExitOK, cli.ExitProblems}, r.code, "pgdrain %v: stdout %q stderr %q", args, r.stdout, r.stderr)
						require.Empty(t, r.stderr, "pgdrain %v", args)
					} else {
						require.Equal(t, want, r.code, "pgdrain %v: stdout %q stderr %q", args, r.stdout, r.stderr)
					}
					if v != nil {
						require.NoError(t, json.Unmarshal([]byte(r.stdout), v), "pgdrain %v printed %q", args, r.stdout)
					}
				}

				var queues []struct {
					Queue      string    `json:"queue"`
					BackoffMin float64   `json:"backoff_min_seconds"`
					BackoffMax float64   `json:"backoff_max_seconds"`
					CreatedAt  time.Time `json:"created_at"`
				}
				run(cli.ExitOK, &queues, "--json", "queues")
				require.Len(t, queues, 2)
				require.Equal(t, 24*3600.0, queues[0].BackoffMax)
				require.True(t, saneTime(queues[0].CreatedAt), "%v", queues[0].CreatedAt)

				var stats struct {
					OldestPendingAt *time.Time `json:"oldest_pending_at"`
					OldestAge       *float64   `json:"oldest_pending_age_seconds"`
				}
				run(cli.ExitOK, &stats, "--json", "stats", "public.cli_events")
				require.NotNil(t, stats.OldestPendingAt)
				require.True(t, saneTime(*stats.OldestPendingAt), "%v", *stats.OldestPendingAt)
				require.InDelta(t, 600, *stats.OldestAge, 120)

				var wedged []struct {
					PartitionKey    string    `json:"partition_key"`
					OldestPendingAt time.Time `json:"oldest_pending_at"`
					Reason          string    `json:"reason"`
				}
				run(cli.ExitProblems, &wedged, "--json", "wedged", "public.cli_events", "--older-than", "1m")
				require.Len(t, wedged, 3)
				for _, w := range wedged {
					require.True(t, saneTime(w.OldestPendingAt), "%v", w.OldestPendingAt)
					if w.PartitionKey == "k2" {
						require.Regexp(t, `^leased until \d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ`, w.Reason)
					}
				}

				var poisoned []struct {
					ID        int64     `json:"id"`
					CreatedAt time.Time `json:"created_at"`
				}
				run(cli.ExitProblems, &poisoned, "--json", "poisoned", "public.cli_events")
				require.Len(t, poisoned, 1)
				require.True(t, saneTime(poisoned[0].CreatedAt), "%v", poisoned[0].CreatedAt)

				run(cli.ExitOK, nil, "skip", "public.cli_events", "6", "--attempts", "0", "--reason", "bad row")
				var actions []struct {
					ActedAt time.Time `json:"acted_at"`
				}
				run(cli.ExitOK, &actions, "--json", "actions", "public.cli_events")
				require.NotEmpty(t, actions)
				require.True(t, saneTime(actions[0].ActedAt), "%v", actions[0].ActedAt)

				run(-1, nil, "--json", "check", "public.cli_events")
				run(cli.ExitOK, nil, "--json", "purge", "public.cli_jobs", "--older-than", "7d", "--dry-run")
				run(cli.ExitOK, nil, "--json", "purge", "public.cli_jobs", "--older-than", "7d")
				run(cli.ExitOK, nil, "--json", "requeue", "public.cli_events", "3")
				run(-1, nil, "retry", "public.cli_events", "1", "--attempts", "1")

				var added struct {
					Copied int64 `json:"copied"`
				}
				run(cli.ExitOK, &added, "--json", "fanout", "add", "public.cli_events", "s1", "--from", "oldest")
				var minSeconds, maxSeconds float64
				require.NoError(t, db.Pool.QueryRow(ctx, `SELECT extract(epoch FROM backoff_min)::float8, extract(epoch FROM backoff_max)::float8
					FROM outbox.queue_info('public.cli_events__s1')`).Scan(&minSeconds, &maxSeconds))
				require.Equal(t, []float64{1, 24 * 3600}, []float64{minSeconds, maxSeconds}, "the sink's queue has the queue's backoff")

				var version struct {
					Database struct {
						Connected bool `json:"connected"`
					} `json:"database"`
				}
				run(cli.ExitOK, &version, "--json", "--version")
				require.True(t, version.Database.Connected)
			})
		}
	}
}

var webServingLine = regexp.MustCompile(`pgdrain web: serving (http://\S+)/ `)

// runWeb runs `pgdrain web` in this process (cli.Run) on a free port and returns a client of it;
// it is interrupted when the test ends and must return 0.
func runWeb(t *testing.T, args ...string) *consoleClient {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	out, errOut := &syncBuffer{}, &syncBuffer{}
	t.Setenv("PGDRAIN_WEB_TOKEN", "")
	t.Setenv("PGDRAIN_WEB_BASIC_AUTH", "")
	t.Setenv("PGDRAIN_WEB_OPERATOR_DSN", "")
	exited := make(chan int, 1)
	go func() {
		exited <- cli.Run(ctx, append([]string{"web", "--listen", "127.0.0.1:0"}, args...), out, errOut)
	}()
	t.Cleanup(func() {
		cancel()
		if t.Failed() {
			return
		}
		select {
		case code := <-exited:
			require.Equal(t, cli.ExitOK, code, "pgdrain web exits 0 when interrupted; stderr: %s", errOut.String())
		case <-time.After(30 * time.Second):
			t.Errorf("pgdrain web did not stop within 30s")
		}
	})
	deadline := time.Now().Add(60 * time.Second)
	for {
		if m := webServingLine.FindStringSubmatch(out.String()); m != nil {
			jar, err := cookiejar.New(nil)
			require.NoError(t, err)
			return &consoleClient{t: t, base: m[1], http: &http.Client{Jar: jar, Timeout: 30 * time.Second,
				CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}}
		}
		select {
		case code := <-exited:
			t.Fatalf("pgdrain web exited early (%d): %s", code, errOut.String())
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("pgdrain web printed no address within 60s; stderr: %s", errOut.String())
		}
	}
}

// The console (`pgdrain web`) reads its pages and runs its actions through pools that read results
// as text (default_query_exec_mode exec or simple_protocol, as behind PgBouncer), whatever
// DateStyle or IntervalStyle the DBA gave the login role: every page shows live figures and the
// times of the rows, and the actions (requeue, skip, release of a lease named by its end) work.
func TestConsole_TextResultsUnderUnusualDateAndIntervalStyles(t *testing.T) {
	for _, s := range textStyleSettings {
		for _, mode := range []string{"exec", "simple_protocol"} {
			t.Run(fmt.Sprintf("%s=%s/%s", s.name, s.value, mode), func(t *testing.T) {
				db := textStyleFixture(t, s.name, s.value)
				c := runWeb(t, "--dsn", withQueryExecMode(t, db.URL, mode), "--wedged-after", "1m")
				for _, page := range []string{"/", "/queues/public.cli_events", "/queues/public.cli_jobs", "/escalations"} {
					code, body := c.get(page)
					require.Equal(t, http.StatusOK, code, "%s: %s", page, body)
					for _, bad := range []string{"not live", "SQLSTATE", "invalid", "bad interval", "cannot", "class=\"error\""} {
						require.NotContains(t, body, bad, "%s", page)
					}
				}
				_, body := c.get("/queues/public.cli_events")
				require.Contains(t, body, "leased until 20", "the leased head's reason, its time rewritten")
				require.Contains(t, body, `name="leased_until" value="20`, "the release form names the lease by its end")
				_, esc := c.get("/escalations")
				require.Contains(t, esc, "api 5xx")

				token := c.csrf("/queues/public.cli_events")
				m := regexp.MustCompile(`name="leased_until" value="([^"]+)"`).FindStringSubmatch(body)
				require.NotNil(t, m)
				code, res := c.post("/actions/release", url.Values{"csrf": {token}, "queue": {"public.cli_events"}, "id": {"2"},
					"leased_until": {m[1]}, "confirm": {"yes"}})
				require.Equal(t, http.StatusSeeOther, code, res)
				var leased bool
				require.NoError(t, db.Pool.QueryRow(context.Background(),
					`SELECT lease_token IS NOT NULL FROM public.cli_events WHERE id = 2`).Scan(&leased))
				require.False(t, leased, "the lease the page showed is released")
				code, res = c.post("/actions/requeue", url.Values{"csrf": {token}, "queue": {"public.cli_events"}, "id": {"3"}, "confirm": {"yes"}})
				require.Equal(t, http.StatusSeeOther, code, res)
				code, res = c.post("/actions/purge", url.Values{"csrf": {token}, "queue": {"public.cli_jobs"}, "older_than": {"7d"}, "confirm": {"yes"}})
				require.Equal(t, http.StatusSeeOther, code, res)
				code, res = c.get("/queues/public.cli_jobs")
				require.Equal(t, http.StatusOK, code, res)
				require.Contains(t, res, "deleted 3 sent row(s)")
			})
		}
	}
}
