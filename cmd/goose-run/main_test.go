package main

import (
	"bytes"
	"context"
	"flag"
	"io/fs"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/pgdrain/pgdrain/internal/testdb"
	"github.com/pgdrain/pgdrain/migrations"
)

// firstMigration is the name of module's first migration file (the 0.1.0 baseline, or 00001 before it).
func firstMigration(t *testing.T, module string) string {
	t.Helper()
	entries, err := fs.ReadDir(migrations.FS, module)
	require.NoError(t, err)
	require.NotEmpty(t, entries)
	return entries[0].Name()
}

func TestUpStatusVersion(t *testing.T) {
	db := testdb.NewEmpty(t)
	first := firstMigration(t, "outbox")
	var out bytes.Buffer
	require.NoError(t, run(context.Background(), []string{"--dsn", db.URL, "up"}, &out))
	require.Contains(t, out.String(), "outbox: up "+first)

	out.Reset()
	require.NoError(t, run(context.Background(), []string{"--dsn", db.URL, "up"}, &out))
	require.Contains(t, out.String(), "no migrations to apply")

	out.Reset()
	require.NoError(t, run(context.Background(), []string{"--dsn", db.URL, "status"}, &out))
	require.Regexp(t, `outbox: `+regexp.QuoteMeta(first)+`\s+applied `, out.String())

	out.Reset()
	require.NoError(t, run(context.Background(), []string{"--dsn", db.URL, "--module", "outbox", "version"}, &out))
	require.Regexp(t, `outbox: version [1-9]`, out.String())
}

func TestUnreachableDatabaseIsOneLineError(t *testing.T) {
	err := run(context.Background(), []string{"--dsn", "postgres://nobody@127.0.0.1:1/none?connect_timeout=2", "status"}, &bytes.Buffer{})
	require.Error(t, err)
	require.True(t, strings.HasPrefix(err.Error(), "connecting to database: "), err.Error())
	require.NotContains(t, err.Error(), "\n")
}

func TestUsageErrors(t *testing.T) {
	for name, args := range map[string][]string{
		"no command":        {"--dsn", "postgres://x@127.0.0.1:1/x"},
		"unknown command":   {"--dsn", "postgres://x@127.0.0.1:1/x", "sideways"},
		"up-to without N":   {"--dsn", "postgres://x@127.0.0.1:1/x", "--module", "outbox", "up-to"},
		"up-to bad N":       {"--dsn", "postgres://x@127.0.0.1:1/x", "--module", "outbox", "up-to", "x"},
		"unknown module":    {"--dsn", "postgres://x@127.0.0.1:1/x", "--module", "nope", "up"},
		"status with extra": {"--dsn", "postgres://x@127.0.0.1:1/x", "status", "1"},
	} {
		t.Run(name, func(t *testing.T) {
			err := run(context.Background(), args, &bytes.Buffer{})
			require.ErrorAs(t, err, new(usageError), "a usage error (exit 2)")
		})
	}
}

// The command is checked before the database: a wrong command says so even without a DSN.
func TestCommandIsCheckedBeforeTheDSN(t *testing.T) {
	t.Setenv("DATABASE_URL", "")
	err := run(context.Background(), []string{"sideways"}, &bytes.Buffer{})
	require.ErrorAs(t, err, new(usageError))
	require.Contains(t, err.Error(), `unknown command "sideways"`)
	err = run(context.Background(), []string{"status"}, &bytes.Buffer{})
	require.ErrorAs(t, err, new(usageError))
	require.Contains(t, err.Error(), "no database")
}

func TestHelpIsNotAnError(t *testing.T) {
	for _, arg := range []string{"-h", "--help"} {
		require.ErrorIs(t, run(context.Background(), []string{arg}, &bytes.Buffer{}), flag.ErrHelp)
	}
}

// Replicas that deploy at once take turns (goose's PostgreSQL session locker): every one succeeds
// and the migrations are applied once.
func TestConcurrentDeployersAreSerialized(t *testing.T) {
	db := testdb.NewEmpty(t)
	errs := make(chan error, 4)
	for range 4 {
		go func() { errs <- run(context.Background(), []string{"--dsn", db.URL, "up"}, &bytes.Buffer{}) }()
	}
	for range 4 {
		require.NoError(t, <-errs)
	}
	var out bytes.Buffer
	require.NoError(t, run(context.Background(), []string{"--dsn", db.URL, "status"}, &out))
	require.NotContains(t, out.String(), "pending")
}

// A migration that waits for a table lock gives up and is tried again; the producer it waited for
// neither fails nor waits long. 00042 installs a trigger on every partitioned queue table in one
// transaction: with a producer that wrote the second table and writes the first a while later, the
// migration (holding the first, waiting for the second) and the producer deadlocked, and the
// producer lost its transaction (40P01) when its own deadlock check came first (an upgrade helper's
// finding). Now the migration waits at most --lock-timeout (500ms) and is rolled back, the
// producer commits, and the migration goes through on a later try.
func TestUp_AMigrationWaitingForALockIsTriedAgainNotAProducer(t *testing.T) {
	ctx := context.Background()
	db := testdb.NewEmpty(t)
	require.NoError(t, run(ctx, []string{"--dsn", db.URL, "--module", "outbox", "up-to", "41"}, &bytes.Buffer{}))
	setup, err := pgx.Connect(ctx, db.URL)
	require.NoError(t, err)
	defer setup.Close(ctx)
	_, err = setup.Exec(ctx, `SELECT outbox.create_queue('public.first', 'k'); SELECT outbox.create_queue('public.second', 'k')`)
	require.NoError(t, err)

	producer, err := pgx.Connect(ctx, db.URL)
	require.NoError(t, err)
	defer producer.Close(ctx)
	tx, err := producer.Begin(ctx)
	require.NoError(t, err)
	_, err = tx.Exec(ctx, `INSERT INTO public.second (event_type, payload, k) VALUES ('e', '{}', 'a')`)
	require.NoError(t, err)

	var out bytes.Buffer
	migrated := make(chan error, 1)
	go func() { migrated <- run(ctx, []string{"--dsn", db.URL, "--module", "outbox", "up"}, &out) }()
	// Past deadlock_timeout (1s): the producer's deadlock check would have come first.
	time.Sleep(1300 * time.Millisecond)
	start := time.Now()
	_, err = tx.Exec(ctx, `INSERT INTO public.first (event_type, payload, k) VALUES ('e', '{}', 'a')`)
	require.NoError(t, err, "the producer's second write")
	require.NoError(t, tx.Commit(ctx), "the producer commits")
	require.Less(t, time.Since(start), time.Second, "the producer waited at most about one lock timeout")

	require.NoError(t, <-migrated)
	require.Contains(t, out.String(), "outbox: a migration waited 500ms for a lock and was rolled back")
	require.Contains(t, out.String(), "outbox: up 00042_")
	var triggers int
	require.NoError(t, setup.QueryRow(ctx, `SELECT count(*) FROM pg_trigger WHERE tgname = 'pgdrain_key_fixed'`).Scan(&triggers))
	require.Equal(t, 2, triggers, "both queue tables got the trigger")
}

// A migration that keeps timing out fails after --lock-retries tries, saying why and what to do.
func TestUp_GivesUpAfterItsRetries(t *testing.T) {
	ctx := context.Background()
	db := testdb.NewEmpty(t)
	require.NoError(t, run(ctx, []string{"--dsn", db.URL, "--module", "outbox", "up-to", "41"}, &bytes.Buffer{}))
	holder, err := pgx.Connect(ctx, db.URL)
	require.NoError(t, err)
	defer holder.Close(ctx)
	_, err = holder.Exec(ctx, `SELECT outbox.create_queue('public.held', 'k')`)
	require.NoError(t, err)
	tx, err := holder.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	_, err = tx.Exec(ctx, `INSERT INTO public.held (event_type, payload, k) VALUES ('e', '{}', 'a')`)
	require.NoError(t, err)

	var out bytes.Buffer
	err = run(ctx, []string{"--dsn", db.URL, "--module", "outbox", "--lock-timeout", "100ms", "--lock-retries", "2", "up"}, &out)
	require.Error(t, err)
	require.Contains(t, err.Error(), "00042_")
	require.Contains(t, err.Error(), "tried 3 times")
	require.Contains(t, out.String(), "(2 of 2)")
}

// A --lock-timeout not below the server's deadlock_timeout is said: a producer's deadlock check
// could then come first, and the producer fail instead of the migration.
func TestUp_WarnsOfALockTimeoutNotBelowTheDeadlockTimeout(t *testing.T) {
	ctx := context.Background()
	db := testdb.NewEmpty(t)
	conn, err := pgx.Connect(ctx, db.URL)
	require.NoError(t, err)
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, `SELECT set_config('deadlock_timeout', '200ms', false)`)
	require.NoError(t, err)
	_, err = conn.Exec(ctx, `DO $$ BEGIN EXECUTE format('ALTER DATABASE %I SET deadlock_timeout = ''200ms''', current_database()); END $$`)
	require.NoError(t, err)
	var out bytes.Buffer
	require.NoError(t, run(ctx, []string{"--dsn", db.URL, "status"}, &out))
	require.Contains(t, out.String(), "--lock-timeout 500ms is not below the server's deadlock_timeout (200ms)")
	out.Reset()
	require.NoError(t, run(ctx, []string{"--dsn", db.URL, "--lock-timeout", "100ms", "status"}, &out))
	require.NotContains(t, out.String(), "deadlock_timeout")
}
