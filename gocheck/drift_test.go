package gocheck

import (
	"context"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/pgdrain/pgdrain/internal/testdb"
)

// functionSchemas are the schemas whose functions sql/functions/<schema>/ holds.
var functionSchemas = []string{"outbox", "alr", "core"}

// Test_MigratedDatabase_EqualsSqlFunctions proves there is no drift between the migrations and the
// canonical sources: database A is only migrated; database B is migrated and then every
// sql/functions file is run on top. Every function must have the same definition in both, and
// every function must have a source file named after it.
func Test_MigratedDatabase_EqualsSqlFunctions(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	a := testdb.New(t)
	b := testdb.New(t)

	files, err := filepath.Glob("../sql/functions/*/*.sql")
	require.NoError(t, err)
	require.NotEmpty(t, files)
	for _, f := range files {
		body, err := os.ReadFile(f)
		require.NoError(t, err)
		_, err = b.Pool.Exec(ctx, string(body))
		require.NoError(t, err, "running %s", f)
	}
	// CREATE OR REPLACE FUNCTION resets SECURITY DEFINER: the privilege files (ALTER FUNCTION ...
	// SECURITY DEFINER, grants) are part of the canonical source and run after the functions.
	privileges, err := filepath.Glob("../sql/privileges/*.sql")
	require.NoError(t, err)
	for _, f := range privileges {
		body, err := os.ReadFile(f)
		require.NoError(t, err)
		_, err = b.Pool.Exec(ctx, string(body))
		require.NoError(t, err, "running %s", f)
	}

	defsA := functionDefinitions(t, a.Pool)
	defsB := functionDefinitions(t, b.Pool)
	for sig, def := range defsB {
		got, ok := defsA[sig]
		require.True(t, ok, "%s is in sql/functions but no migration creates it", sig)
		require.Equal(t, def, got, "%s differs between the migrations and sql/functions", sig)
	}
	for sig := range defsA {
		_, ok := defsB[sig]
		require.True(t, ok, "%s exists only in the migrated database", sig)
	}

	have := map[string]bool{}
	for _, f := range files {
		have[filepath.Base(filepath.Dir(f))+"."+strings.TrimSuffix(filepath.Base(f), ".sql")] = true
	}
	for sig := range defsA {
		name := sig[:strings.Index(sig, "(")]
		require.True(t, have[name], "%s has no source file sql/functions/%s.sql", sig,
			strings.Replace(name, ".", "/", 1))
	}
}

func functionDefinitions(t *testing.T, pool *pgxpool.Pool) map[string]string {
	t.Helper()
	rows, err := pool.Query(context.Background(), `
		SELECT p.oid::regprocedure::text, pg_get_functiondef(p.oid)
		FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
		WHERE n.nspname = ANY ($1)
		  AND NOT EXISTS (SELECT 1 FROM pg_depend d WHERE d.objid = p.oid AND d.deptype = 'e')`,
		functionSchemas)
	require.NoError(t, err)
	defer rows.Close()
	defs := map[string]string{}
	for rows.Next() {
		var sig, def string
		require.NoError(t, rows.Scan(&sig, &def))
		defs[sig] = def
	}
	require.NoError(t, rows.Err())
	keys := make([]string, 0, len(defs))
	for k := range defs {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	require.NotEmpty(t, keys)
	return defs
}
