package gocheck

import (
	"context"
	"fmt"
	"io/fs"
	"log/slog"
	osexec "os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/pgdrain/pgdrain/cmd/pgdrain/cli"
	"github.com/pgdrain/pgdrain/drainer"
	"github.com/pgdrain/pgdrain/escalation"
	"github.com/pgdrain/pgdrain/internal/testdb"
	"github.com/pgdrain/pgdrain/internal/version"
	"github.com/pgdrain/pgdrain/migrations"
)

// newestMigration is the highest migration number of module in migrations/<module>/.
func newestMigration(t *testing.T, module string) int {
	t.Helper()
	entries, err := fs.ReadDir(migrations.FS, module)
	require.NoError(t, err)
	newest := 0
	for _, e := range entries {
		num, _, ok := strings.Cut(e.Name(), "_")
		require.True(t, ok, "migration %s/%s is named NNNNN_name.sql", module, e.Name())
		n, err := strconv.Atoi(num)
		require.NoError(t, err, "migration %s/%s", module, e.Name())
		newest = max(newest, n)
	}
	return newest
}

// A migrated database's outbox.version() and alr.version() name the newest migration of their
// module and this tree's release: a new migration that forgets to bump sql/functions/<module>/
// version.sql fails here. What the Go clients need is never newer than what the migrations install.
func TestVersions_SchemaEqualsNewestMigration(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testdb.New(t)
	needed := map[string]int{"outbox": drainer.OutboxMigrationNeeded, "alr": escalation.AlrMigrationNeeded}
	for _, module := range []string{"outbox", "alr"} {
		s, err := version.Read(ctx, db.Pool, module)
		require.NoError(t, err)
		require.Equal(t, version.Schema{Module: module, Installed: true, Version: version.Release,
			Migration: newestMigration(t, module)}, s,
			"%s.version() after goose up: bump sql/functions/%s/version.sql in every new migration", module, module)
		require.LessOrEqual(t, needed[module], s.Migration, "the Go clients need no migration that does not exist")
	}
}

// pgdrain --version prints the binary's version and, with a database, its schemas' versions; without
// one it says so and still exits 0; against an older schema it says what to run.
func TestVersions_CLIPrintsTheBinaryAndTheDatabase(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	outbox, alr := newestMigration(t, "outbox"), newestMigration(t, "alr")

	r := runCLI(t, "--dsn", db.URL, "--version")
	require.Equal(t, cli.ExitOK, r.code, r.stderr)
	require.Equal(t, fmt.Sprintf("pgdrain %s\ndatabase outbox: %s (migration %05d)\ndatabase alr: %s (migration %05d)\n",
		version.Binary(), version.Release, outbox, version.Release, alr), r.stdout)
	require.Empty(t, r.stderr)

	var rep struct {
		Version  string `json:"version"`
		Database struct {
			Connected bool `json:"connected"`
			Outbox    struct {
				Version   string `json:"version"`
				Migration int    `json:"migration"`
				Needed    int    `json:"needed"`
			} `json:"outbox"`
		} `json:"database"`
	}
	runCLIJSON(t, cli.ExitOK, &rep, "--version", "--dsn", db.URL)
	require.Equal(t, version.Binary(), rep.Version)
	require.True(t, rep.Database.Connected)
	require.Equal(t, outbox, rep.Database.Outbox.Migration)
	require.Equal(t, drainer.OutboxMigrationNeeded, rep.Database.Outbox.Needed)

	nowhere := "postgres://nobody@127.0.0.1:1/x?sslmode=disable&connect_timeout=2"
	r = runCLI(t, "--version", "--dsn", nowhere)
	require.Equal(t, cli.ExitOK, r.code, "no database is not an error for --version: %s", r.stderr)
	first, rest, _ := strings.Cut(r.stdout, "\n")
	require.Equal(t, "pgdrain "+version.Binary(), first)
	require.True(t, strings.HasPrefix(rest, "database: not connected (connecting to database: "), r.stdout)
	require.Empty(t, r.stderr)
	var off struct {
		Database struct {
			Connected bool   `json:"connected"`
			Error     string `json:"error"`
		} `json:"database"`
	}
	runCLIJSON(t, cli.ExitOK, &off, "--version", "--dsn", nowhere)
	require.False(t, off.Database.Connected)
	require.Contains(t, off.Database.Error, "connecting to database")

	// A database of the development era migrated to outbox 00024 (before outbox.version(); the history,
	// sql/history) without the alr module.
	old := testdb.NewEmpty(t)
	migrateHistoryTo(t, old, "outbox", 24)
	r = runCLI(t, "--version", "--dsn", old.URL)
	require.Equal(t, cli.ExitOK, r.code, r.stderr)
	require.Equal(t, fmt.Sprintf("pgdrain %s\n"+
		"database outbox: before migration 00025 (no outbox.version()), older than this pgdrain needs (%05d): "+
		"apply the rest of sql/history/outbox first, then run goose-run up (docs/install.md#databases-migrated-before-010)\n"+
		"database alr: not installed\n", version.Binary(), drainer.OutboxMigrationNeeded), r.stdout)
}

// The drainer refuses to start against an outbox schema older than it needs, at once (no retries),
// with an error that says where the schema is, what it needs and what to run: a schema before
// outbox.version() (a database migrated with the development history up to 00024), one whose
// version() is older, and a database without the outbox schema.
func TestVersions_DrainerRefusesAnOlderSchema(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	run := func(db *testdb.DB) error {
		t.Helper()
		d, err := drainer.New(db.Pool, drainer.Config{Table: "public.events", PollFallback: time.Minute},
			drDecode, func(context.Context, string, drEvent) error { return nil },
			drainer.WithLogger[drEvent](slog.New(slog.DiscardHandler)))
		require.NoError(t, err)
		rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		err = d.Run(rctx)
		require.NoError(t, rctx.Err(), "Run returned at once, not after waiting")
		return err
	}
	hint := fmt.Sprintf("this drainer needs %05d or later: run goose-run up (cmd/goose-run), "+
		"or apply the migrations/outbox/*.sql it lacks in order (docs/install.md)", drainer.OutboxMigrationNeeded)
	// Below the baseline goose-run up would fail (the baseline refuses the schema, 42P06).
	historyHint := fmt.Sprintf("this drainer needs %05d or later: the 0.1.0 baseline (migration 00025) refuses a "+
		"schema migrated part way through the history before it; apply the rest of sql/history/outbox first, "+
		"then run goose-run up (docs/install.md#databases-migrated-before-010)", drainer.OutboxMigrationNeeded)

	before := testdb.NewEmpty(t)
	migrateHistoryTo(t, before, "outbox", 24)
	_, err := before.Pool.Exec(ctx, `SELECT outbox.create_queue('public.events', 'resource_id')`)
	require.NoError(t, err)
	err = run(before)
	require.ErrorIs(t, err, drainer.ErrSchemaTooOld)
	require.EqualError(t, err, "database schema outbox predates migration 00025 (it has no outbox.version()), "+historyHint)

	older := testdb.New(t)
	_, err = older.Pool.Exec(ctx, `SELECT outbox.create_queue('public.events', 'resource_id')`)
	require.NoError(t, err)
	_, err = older.Pool.Exec(ctx, fmt.Sprintf(`CREATE OR REPLACE FUNCTION outbox.version(OUT version text, OUT migration integer)
		LANGUAGE sql STABLE SET search_path = '' AS $$ SELECT '0.0.9'::text, %d $$`, drainer.OutboxMigrationNeeded-1))
	require.NoError(t, err)
	err = run(older)
	require.ErrorIs(t, err, drainer.ErrSchemaTooOld)
	require.EqualError(t, err, fmt.Sprintf("database schema outbox is at migration %05d, ", drainer.OutboxMigrationNeeded-1)+historyHint)

	none := testdb.NewEmpty(t)
	err = run(none)
	require.ErrorIs(t, err, drainer.ErrSchemaTooOld)
	require.EqualError(t, err, "database has no schema outbox, "+hint)
}

// The escalation engine refuses to start against an alr schema older than it needs (a database
// migrated with the development history up to 00005), at once, saying what to run.
func TestVersions_EscalationRefusesAnOlderSchema(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	db := testdb.NewEmpty(t)
	migrateHistoryTo(t, db, "alr", 5)
	e, err := escalation.New(db.Pool, map[string]escalation.Notifier{"test": &escCounter{n: map[string]int{}}},
		escalation.Config{Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	err = e.Run(ctx)
	require.NoError(t, ctx.Err(), "Run returned at once, not after waiting")
	require.ErrorIs(t, err, escalation.ErrSchemaTooOld)
	require.EqualError(t, err, fmt.Sprintf("database schema alr predates migration 00006 (it has no alr.version()), "+
		"this escalation engine needs %05d or later: the 0.1.0 baseline (migration 00006) refuses a schema migrated "+
		"part way through the history before it; apply the rest of sql/history/alr first, then run goose-run up "+
		"(docs/install.md#databases-migrated-before-010)", escalation.AlrMigrationNeeded))
}

// RunOnce refuses an alr schema older than the engine needs as Run does, before it takes anything:
// a migrated database with a due step whose alr.version() is faked one migration older. Once the
// schema is right, the same engine delivers the step.
func TestVersions_EscalationRunOnceRefusesAnOlderSchema(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testdb.New(t)
	policy := ladderPolicy(t, db.Pool, "test", "0s")
	_, escalationID := firingAlert(t, db.Pool, "disk full", policy, time.Second)
	fakeVersion := func(migration int) {
		t.Helper()
		_, err := db.Pool.Exec(ctx, fmt.Sprintf(`CREATE OR REPLACE FUNCTION alr.version(OUT version text, OUT migration integer)
			LANGUAGE sql STABLE SET search_path = '' AS $$ SELECT '0.0.9'::text, %d $$`, migration))
		require.NoError(t, err)
	}
	fakeVersion(escalation.AlrMigrationNeeded - 1)
	notifier := &escCounter{n: map[string]int{}}
	e, err := escalation.New(db.Pool, map[string]escalation.Notifier{"test": notifier},
		escalation.Config{Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)

	res, err := e.RunOnce(ctx)
	require.ErrorIs(t, err, escalation.ErrSchemaTooOld)
	require.EqualError(t, err, fmt.Sprintf("database schema alr is at migration %05d, this escalation engine needs %05d "+
		"or later: the 0.1.0 baseline (migration 00006) refuses a schema migrated part way through the history before it; "+
		"apply the rest of sql/history/alr first, then run goose-run up (docs/install.md#databases-migrated-before-010)",
		escalation.AlrMigrationNeeded-1, escalation.AlrMigrationNeeded))
	require.Equal(t, escalation.TickResult{}, res)
	var leased bool
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT lease_token IS NOT NULL FROM alr.alert_escalations WHERE id = $1::uuid`,
		escalationID).Scan(&leased))
	require.False(t, leased, "nothing was taken")
	require.Empty(t, journal(t, db.Pool))

	fakeVersion(escalation.AlrMigrationNeeded)
	res, err = e.RunOnce(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, res.Delivered)
}

// pgdrain web refuses, before it listens, a database whose outbox schema is older than the console
// needs (a migrated database whose outbox.version() is faked one migration older), exiting 3 with
// the error that says what to run; the same database at the right migration serves.
func TestVersions_WebRefusesAnOlderSchema(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testdb.New(t)
	fakeVersion := func(migration int) {
		t.Helper()
		_, err := db.Pool.Exec(ctx, fmt.Sprintf(`CREATE OR REPLACE FUNCTION outbox.version(OUT version text, OUT migration integer)
			LANGUAGE sql STABLE SET search_path = '' AS $$ SELECT '0.0.9'::text, %d $$`, migration))
		require.NoError(t, err)
	}
	web := func() cliResult {
		t.Helper()
		wctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		defer cancel()
		var out, errOut strings.Builder
		code := cli.Run(wctx, []string{"web", "--dsn", db.URL, "--read-only", "--listen", "127.0.0.1:0"}, &out, &errOut)
		return cliResult{code: code, stdout: out.String(), stderr: errOut.String()}
	}

	fakeVersion(version.OutboxNeeded - 1)
	start := time.Now()
	r := web()
	require.Less(t, time.Since(start), 3*time.Second, "pgdrain web returned at once, not when its context ended")
	require.Equal(t, cli.ExitDatabase, r.code, r.stderr)
	require.Empty(t, r.stdout, "it never served")
	require.Equal(t, fmt.Sprintf("pgdrain: database schema outbox is at migration %05d, this console needs %05d or later: "+
		"the 0.1.0 baseline (migration 00025) refuses a schema migrated part way through the history before it; "+
		"apply the rest of sql/history/outbox first, then run goose-run up (docs/install.md#databases-migrated-before-010)\n",
		version.OutboxNeeded-1, version.OutboxNeeded), r.stderr)

	fakeVersion(version.OutboxNeeded)
	r = web()
	require.Equal(t, cli.ExitOK, r.code, r.stderr)
	require.Contains(t, r.stdout, "pgdrain web: serving http://127.0.0.1:")
}

// docs/install.md: the Up part of every migration file (everything before "-- +goose Down"), applied
// in order with psql, gives the same functions, bodies and grants as goose, and the same versions.
func TestVersions_PlainSQLFilesEqualGoose(t *testing.T) {
	t.Parallel()
	_, err := osexec.LookPath("psql")
	require.NoError(t, err, "psql is needed (scripts/ensure-deps.sh installs it)")
	ctx := context.Background()
	goose := testdb.New(t)
	plain := testdb.NewEmpty(t)
	for _, module := range []string{"outbox", "alr"} {
		entries, err := fs.ReadDir(migrations.FS, module)
		require.NoError(t, err)
		for _, e := range entries { // ReadDir sorts by name: number order
			b, err := fs.ReadFile(migrations.FS, module+"/"+e.Name())
			require.NoError(t, err)
			up, _, found := strings.Cut(string(b), "\n-- +goose Down")
			require.True(t, found, "%s/%s has a Down section", module, e.Name())
			cmd := osexec.Command("psql", "-X", "-q", "-v", "ON_ERROR_STOP=1", "--single-transaction", "-d", plain.URL)
			cmd.Stdin = strings.NewReader(up)
			out, err := cmd.CombinedOutput()
			require.NoError(t, err, "%s/%s with psql: %s", module, e.Name(), out)
		}
	}
	const functions = `
		SELECT p.oid::regprocedure::text, pg_get_functiondef(p.oid), p.prosecdef, coalesce(p.proacl::text, '')
		FROM pg_proc p WHERE p.pronamespace IN ('outbox'::regnamespace, 'alr'::regnamespace, 'core'::regnamespace)
		ORDER BY 1`
	read := func(db *testdb.DB) [][]any {
		rows, err := db.Pool.Query(ctx, functions)
		require.NoError(t, err)
		all, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) ([]any, error) { return r.Values() })
		require.NoError(t, err)
		return all
	}
	want := read(goose)
	require.NotEmpty(t, want)
	require.Equal(t, want, read(plain))
	for _, module := range []string{"outbox", "alr"} {
		g, err := version.Read(ctx, goose.Pool, module)
		require.NoError(t, err)
		p, err := version.Read(ctx, plain.Pool, module)
		require.NoError(t, err)
		require.Equal(t, g, p)
	}
}

// A schema that works but lacks a module's newest security fix (outbox 00030, alr 00007: functions
// that searched the caller's temporary schema first) is reported by every client: pgdrain --version
// says what to run, the drainer and the escalation engine start and log a warning saying so. Faked
// with version() one migration older; the real schema is the newest.
func TestVersions_ClientsWarnOfASchemaBeforeTheSecurityFix(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testdb.New(t)
	_, err := db.Pool.Exec(ctx, fmt.Sprintf(`
		SELECT outbox.create_queue('public.events', 'resource_id');
		CREATE OR REPLACE FUNCTION outbox.version(OUT version text, OUT migration integer)
		  LANGUAGE sql STABLE SET search_path = pg_catalog, pg_temp AS $$ SELECT '0.1.0'::text, %d $$;
		CREATE OR REPLACE FUNCTION alr.version(OUT version text, OUT migration integer)
		  LANGUAGE sql STABLE SET search_path = pg_catalog, pg_temp AS $$ SELECT '0.1.0'::text, %d $$;`,
		version.OutboxSecurityFix-1, version.AlrSecurityFix-1))
	require.NoError(t, err)

	r := runCLI(t, "--dsn", db.URL, "--version")
	require.Equal(t, cli.ExitOK, r.code, r.stderr)
	require.Equal(t, fmt.Sprintf("pgdrain %s\n"+
		"database outbox: 0.1.0 (migration %05d), before the security fix of migration %05d (docs/security.md): run goose-run up\n"+
		"database alr: 0.1.0 (migration %05d), before the security fix of migration %05d (docs/security.md): run goose-run up\n",
		version.Binary(), version.OutboxSecurityFix-1, version.OutboxSecurityFix, version.AlrSecurityFix-1, version.AlrSecurityFix), r.stdout)
	var rep struct {
		Database struct {
			Outbox struct {
				SecurityFix int `json:"security_fix"`
			} `json:"outbox"`
		} `json:"database"`
	}
	runCLIJSON(t, cli.ExitOK, &rep, "--version", "--dsn", db.URL)
	require.Equal(t, version.OutboxSecurityFix, rep.Database.Outbox.SecurityFix)

	logger, logs := drCapture(t)
	d, err := drainer.New(db.Pool, drainer.Config{Table: "public.events", PollFallback: time.Minute},
		drDecode, func(context.Context, string, drEvent) error { return nil }, drainer.WithLogger[drEvent](logger))
	require.NoError(t, err)
	rctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
	defer cancel()
	require.NoError(t, d.Run(rctx), "the drainer runs")
	require.Contains(t, logs.String(), fmt.Sprintf("database schema outbox is at migration %05d, before the security fix of migration %05d (docs/security.md): run goose-run up",
		version.OutboxSecurityFix-1, version.OutboxSecurityFix))

	escLogs := &syncBuffer{}
	e, err := escalation.New(db.Pool, map[string]escalation.Notifier{"test": &escCounter{n: map[string]int{}}},
		escalation.Config{Logger: slog.New(slog.NewTextHandler(escLogs, nil))})
	require.NoError(t, err)
	_, err = e.RunOnce(ctx)
	require.NoError(t, err, "the engine runs")
	require.Contains(t, escLogs.String(), fmt.Sprintf("database schema alr is at migration %05d, before the security fix of migration %05d",
		version.AlrSecurityFix-1, version.AlrSecurityFix))
}
