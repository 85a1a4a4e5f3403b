package gocheck

import (
	"encoding/json"
	"net/url"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/pgdrain/pgdrain/cmd/pgdrain/cli"
)

// A primary whose default_transaction_read_only is on (for the database, or for the operator's
// role in it) refuses every write of the operator commands with SQLSTATE 25006. The error names
// what the command was doing, PostgreSQL's words and SQLSTATE, and what the server says of itself:
// a primary (not a standby), the setting and where it was set, and the statement that lifts it.
// Before, it was PostgreSQL's bare "cannot execute SELECT FOR UPDATE in a read-only transaction
// (SQLSTATE 25006)", whatever the command.
func TestCLI_ReadOnlyErrorsNameTheOperationAndTheCause(t *testing.T) {
	t.Parallel()
	db := cliFixture(t)
	operator := loginURL(t, db, "pgdrain_operator")
	u, err := url.Parse(operator)
	require.NoError(t, err)
	role, dbname := pgx.Identifier{u.User.Username()}.Sanitize(), pgx.Identifier{db.Name}.Sanitize()
	out := runCLI(t, "--dsn", operator, "skip", "public.cli_events", "1", "--attempts", "0", "--reason", "peer rejects it")
	require.Equal(t, cli.ExitOK, out.code, out.stderr)

	cliExec(t, db.Pool, "ALTER DATABASE "+dbname+" SET default_transaction_read_only = on")
	out = runCLI(t, "--dsn", operator, "requeue", "public.cli_events", "1")
	require.Equal(t, cli.ExitDatabase, out.code, out.stderr)
	require.Contains(t, out.stderr, "pgdrain: requeueing poisoned rows: cannot execute ")
	require.Contains(t, out.stderr, " in a read-only transaction (SQLSTATE 25006): the server is a primary (pg_is_in_recovery() is false) "+
		"that refuses writes: default_transaction_read_only = on, set for database "+dbname+
		" (lift it with ALTER DATABASE "+dbname+" RESET default_transaction_read_only)")
	require.NotContains(t, out.stderr, "standby")

	out = runCLI(t, "--json", "--dsn", operator, "purge", "public.cli_events")
	require.Equal(t, cli.ExitDatabase, out.code, out.stderr)
	var rep struct {
		Error    string `json:"error"`
		Code     string `json:"code"`
		SQLState string `json:"sqlstate"`
	}
	require.NoError(t, json.Unmarshal([]byte(out.stderr), &rep), out.stderr)
	require.Equal(t, "database", rep.Code)
	require.Equal(t, "25006", rep.SQLState)
	require.Regexp(t, `^purging sent rows \(after 0 deleted\): cannot execute .* in a read-only transaction \(SQLSTATE 25006\): `+
		`the server is a primary .*set for database `, rep.Error)

	cliExec(t, db.Pool, "ALTER DATABASE "+dbname+" RESET default_transaction_read_only")
	cliExec(t, db.Pool, "ALTER ROLE "+role+" IN DATABASE "+dbname+" SET default_transaction_read_only = on")
	out = runCLI(t, "--dsn", operator, "dismiss", "public.cli_events", "1", "--reason", "never deliverable")
	require.Equal(t, cli.ExitDatabase, out.code, out.stderr)
	require.Contains(t, out.stderr, "pgdrain: dismissing poisoned rows: cannot execute ")
	require.Contains(t, out.stderr, "default_transaction_read_only = on, set for role "+role+" in database "+dbname+
		" (lift it with ALTER ROLE "+role+" IN DATABASE "+dbname+" RESET default_transaction_read_only)")

	cliExec(t, db.Pool, "ALTER ROLE "+role+" IN DATABASE "+dbname+" RESET default_transaction_read_only")
	out = runCLI(t, "--dsn", operator, "requeue", "public.cli_events", "1")
	require.Equal(t, cli.ExitOK, out.code, out.stderr)
	require.Contains(t, out.stdout, "requeued 1 poisoned row(s)")
}
