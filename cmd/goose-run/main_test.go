package main

import (
	"bytes"
	"context"
	"flag"
	"io/fs"
	"regexp"
	"strings"
	"testing"

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
