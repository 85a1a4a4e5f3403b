package gocheck

import (
	"context"
	"os"
	osexec "os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/pgdrain/pgdrain/internal/testdb"
)

// Every code sample in the docs is run by a test. The SQL samples live in docs/examples/*.sql:
// TestDocs_SQLExamplesRun runs them with psql, in file order, on one fresh database, and checks
// the state each one leaves; TestDocs_QuotesEverySample checks that README.md or a page of docs/
// quotes each of them, and the Go example (docs/examples/godrain, run by go test as an Example),
// verbatim. TestDocs_RelayConfigsAreValidAndQuoted does the same for docs/examples/relay/*.yaml.

// docsExampleChecks holds, per sample file, what the database must look like after it ran.
var docsExampleChecks = map[string]func(t *testing.T, pool *pgxpool.Pool, out string){
	"01_create_queue.sql": func(t *testing.T, pool *pgxpool.Pool, _ string) {
		require.Equal(t, "account_id", docsScalar[string](t, pool,
			`SELECT partition_column FROM outbox.queues WHERE queue = 'public.account_events'`))
		require.Equal(t, 0, docsScalar[int](t, pool, `SELECT count(*)::int FROM outbox.check_indexes('public.account_events')`))
	},
	"02_produce.sql": func(t *testing.T, pool *pgxpool.Pool, _ string) {
		require.Equal(t, "account.created alice,account.email_changed alice,account.created bob", docsScalar[string](t, pool,
			`SELECT string_agg(event_type || ' ' || account_id, ',' ORDER BY id) FROM public.account_events`))
		require.Equal(t, "alice@example.org", docsScalar[string](t, pool, `SELECT email FROM public.accounts WHERE account_id = 'alice'`))
	},
	"03_claim_and_apply.sql": func(t *testing.T, pool *pgxpool.Pool, _ string) {
		require.Equal(t, "1 sent 0 -|2 pending 1 HTTP 503|3 pending 10 HTTP 422: bad email", docsScalar[string](t, pool,
			`SELECT string_agg(id || ' ' || CASE WHEN sent_at IS NULL THEN 'pending' ELSE 'sent' END || ' ' ||
			                   attempt_count || ' ' || coalesce(last_error, '-'), '|' ORDER BY id)
			 FROM public.account_events`))
		require.True(t, docsScalar[bool](t, pool, `SELECT next_attempt_at > now() - interval '1 minute' FROM public.account_events WHERE id = 2`))
	},
	"04_fencing.sql": func(t *testing.T, pool *pgxpool.Pool, out string) {
		require.Equal(t, "carol sent 0 free", docsScalar[string](t, pool,
			`SELECT account_id || ' ' || CASE WHEN sent_at IS NULL THEN 'pending' ELSE 'sent' END || ' ' || attempt_count || ' ' ||
			        CASE WHEN lease_token IS NULL AND leased_until IS NULL THEN 'free' ELSE 'leased' END
			 FROM public.account_events WHERE id = 4`))
		refused := strings.Index(out, "apply_result \n--------------\n f\n")
		recorded := strings.LastIndex(out, "apply_result \n--------------\n t\n")
		require.True(t, refused >= 0 && recorded > refused, "the late result is refused, then the holder's recorded:\n%s", out)
	},
	"05_batch.sql": func(t *testing.T, pool *pgxpool.Pool, _ string) {
		require.Equal(t, 5, docsScalar[int](t, pool, `SELECT count(sent_at)::int FROM public.jobs`))
	},
	"06_lock_mode.sql": func(t *testing.T, pool *pgxpool.Pool, _ string) {
		require.Equal(t, 6, docsScalar[int](t, pool, `SELECT count(sent_at)::int FROM public.jobs`))
	},
	"07_operations.sql": func(t *testing.T, pool *pgxpool.Pool, out string) {
		require.Equal(t, "true pending 0", docsScalar[string](t, pool,
			`SELECT (id > 4) || ' ' || CASE WHEN sent_at IS NULL THEN 'pending' ELSE 'sent' END || ' ' || attempt_count
			 FROM public.account_events WHERE account_id = 'bob' AND event_type = 'account.created'`),
			"requeue_poisoned gave bob's event a fresh start, at the tail of bob's events")
		require.Contains(t, out, "requeue_poisoned \n------------------\n                1\n")
	},
	"08_ladder.sql": func(t *testing.T, pool *pgxpool.Pool, _ string) {
		require.Equal(t, "1 resolved", docsScalar[string](t, pool,
			`SELECT step_idx || ' ' || stop_reason FROM alr.alert_escalations`))
		require.Equal(t, "0 telegram @oncall delivered", docsScalar[string](t, pool,
			`SELECT string_agg(step_idx || ' ' || channel || ' ' || target || ' ' || outcome, ',') FROM alr.delivery_journal`))
	},
}

func docsScalar[T any](t *testing.T, pool *pgxpool.Pool, sql string) T {
	t.Helper()
	var v T
	require.NoError(t, pool.QueryRow(context.Background(), sql).Scan(&v), sql)
	return v
}

func docsSQLExamples(t *testing.T) []string {
	t.Helper()
	files, err := filepath.Glob("../docs/examples/*.sql")
	require.NoError(t, err)
	require.NotEmpty(t, files)
	return files // Glob sorts
}

func TestDocs_SQLExamplesRun(t *testing.T) {
	t.Parallel()
	_, err := osexec.LookPath("psql")
	require.NoError(t, err, "psql is needed (scripts/ensure-deps.sh installs it)")
	db := testdb.New(t)
	files := docsSQLExamples(t)
	for _, f := range files {
		check, ok := docsExampleChecks[filepath.Base(f)]
		require.True(t, ok, "%s has no check in docsExampleChecks: every sample must be checked", f)
		cmd := osexec.Command("psql", "-X", "-q", "-v", "ON_ERROR_STOP=1", "-d", db.URL, "-f", f)
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "%s failed:\n%s", f, out)
		check(t, db.Pool, string(out))
	}
	require.Len(t, files, len(docsExampleChecks), "a check without its sample file")
}

// docsQuoters returns the markdown files (README.md and docs/*.md, relative to the repository root)
// that contain block verbatim.
func docsQuoters(t *testing.T, block string) []string {
	t.Helper()
	pages, err := filepath.Glob("../docs/*.md")
	require.NoError(t, err)
	var quoters []string
	for _, p := range append([]string{"../README.md"}, pages...) {
		b, err := os.ReadFile(p)
		require.NoError(t, err)
		if strings.Contains(string(b), block) {
			quoters = append(quoters, strings.TrimPrefix(p, "../"))
		}
	}
	return quoters
}

// requireQuoted fails unless README.md or a page of docs/ quotes text verbatim in a ```lang block,
// and returns the files that do.
func requireQuoted(t *testing.T, lang, text, what string) []string {
	t.Helper()
	quoters := docsQuoters(t, "```"+lang+"\n"+text+"\n```")
	require.NotEmpty(t, quoters, "README.md or a page of docs/ must quote %s verbatim in a ```%s block (copy its text)", what, lang)
	return quoters
}

// goSampleQuotes returns the parts of a Go sample file the docs quote: the program between the lines
// "// quote:begin" and "// quote:end" (the excerpt markers left out), and the excerpt between
// "// quote:excerpt:begin" and "// quote:excerpt:end" with one tab of indentation removed.
func goSampleQuotes(t *testing.T, path string) (program, excerpt string) {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	var prog, exc []string
	inProg, inExc, sawExc := false, false, false
	for _, line := range strings.Split(string(b), "\n") {
		switch strings.TrimSpace(line) {
		case "// quote:begin":
			inProg = true
			continue
		case "// quote:end":
			inProg = false
			continue
		case "// quote:excerpt:begin":
			inExc, sawExc = true, true
			continue
		case "// quote:excerpt:end":
			inExc = false
			continue
		}
		if inProg {
			prog = append(prog, line)
		}
		if inExc {
			exc = append(exc, strings.TrimPrefix(line, "\t"))
		}
	}
	require.NotEmpty(t, prog, "%s must mark the quoted program with // quote:begin and // quote:end", path)
	require.True(t, sawExc && len(exc) > 0, "%s must mark the README's excerpt with // quote:excerpt:begin and // quote:excerpt:end", path)
	return strings.TrimSpace(strings.Join(prog, "\n")), strings.TrimSpace(strings.Join(exc, "\n"))
}

func TestDocs_QuotesEverySample(t *testing.T) {
	t.Parallel()
	for _, f := range docsSQLExamples(t) {
		b, err := os.ReadFile(f)
		require.NoError(t, err)
		requireQuoted(t, "sql", strings.TrimSpace(string(b)), strings.TrimPrefix(f, "../"))
	}
	program, excerpt := goSampleQuotes(t, "../docs/examples/godrain/readme_test.go")
	requireQuoted(t, "go", program, "docs/examples/godrain/readme_test.go (between // quote:begin and // quote:end)")
	require.Contains(t, requireQuoted(t, "go", excerpt,
		"docs/examples/godrain/readme_test.go (between // quote:excerpt:begin and // quote:excerpt:end, one tab less)"),
		"README.md", "the README's Go quick start quotes the excerpt")
}
