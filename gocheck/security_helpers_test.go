package gocheck

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/url"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/pgdrain/pgdrain/internal/testdb"
)

// loginURL creates a throwaway LOGIN role that is a member of pgdrainRole (one of the roles
// migration 00002 creates), not a superuser, and returns db's URL with that user. The test cluster
// trusts 127.0.0.1, so no password is needed. The role is dropped when the test ends, after the
// connections opened later are closed (cleanups run last-registered first).
func loginURL(t *testing.T, db *testdb.DB, pgdrainRole string) string {
	t.Helper()
	b := make([]byte, 5)
	_, _ = rand.Read(b)
	login := "pgdrain_t_" + hex.EncodeToString(b)
	_, err := db.Pool.Exec(context.Background(), fmt.Sprintf("CREATE ROLE %s LOGIN NOSUPERUSER IN ROLE %s",
		pgx.Identifier{login}.Sanitize(), pgx.Identifier{pgdrainRole}.Sanitize()))
	require.NoError(t, err)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_, _ = db.Pool.Exec(ctx, fmt.Sprintf("DROP ROLE IF EXISTS %s", pgx.Identifier{login}.Sanitize()))
	})
	u, err := url.Parse(db.URL)
	require.NoError(t, err)
	u.User = url.User(login)
	return u.String()
}

// loginAs returns a connection to db as a fresh login role that is a member of pgdrainRole only.
func loginAs(t *testing.T, db *testdb.DB, pgdrainRole string) *pgx.Conn {
	t.Helper()
	conn, err := pgx.Connect(context.Background(), loginURL(t, db, pgdrainRole))
	require.NoError(t, err, "connecting as a member of %s", pgdrainRole)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = conn.Close(ctx)
	})
	return conn
}

// sqlState returns the SQLSTATE and message of err, or "" when err is nil or not from the server.
func sqlState(err error) (code, message string) {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return pgErr.Code, pgErr.Message
	}
	return "", ""
}

// stateFingerprint hashes everything a bad call could change: the registry, the partition heads,
// the rows of every registered queue table (that still exists), the relations, triggers and roles that exist. Two equal
// fingerprints mean nothing changed.
func stateFingerprint(t *testing.T, pool *pgxpool.Pool) string {
	t.Helper()
	ctx := context.Background()
	var parts []string
	rows, err := pool.Query(ctx, `SELECT q.table_oid::regclass::text FROM outbox.queues q
		WHERE EXISTS (SELECT 1 FROM pg_class c WHERE c.oid = q.table_oid) ORDER BY q.queue_id`)
	require.NoError(t, err)
	tables, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	for _, tbl := range tables {
		var h string
		require.NoError(t, pool.QueryRow(ctx, fmt.Sprintf(
			`SELECT md5(COALESCE(string_agg(to_jsonb(t)::text, ',' ORDER BY t.id), '')) FROM %s t`, tbl)).Scan(&h))
		parts = append(parts, tbl+"="+h)
	}
	var h string
	require.NoError(t, pool.QueryRow(ctx, `
		SELECT md5(concat_ws('|',
		  (SELECT string_agg(to_jsonb(q)::text, ',' ORDER BY q.queue_id) FROM outbox.queues q),
		  (SELECT string_agg(to_jsonb(h)::text, ',' ORDER BY h.queue_id, h.partition_key) FROM outbox.partition_heads h),
		  (SELECT string_agg(c.oid::regclass::text || ':' || c.relkind::text, ',' ORDER BY c.oid)
		     FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
		     WHERE n.nspname NOT IN ('pg_catalog', 'information_schema', 'pg_toast')),
		  (SELECT string_agg(tg.tgname || '@' || tg.tgrelid::regclass::text, ',' ORDER BY tg.oid)
		     FROM pg_trigger tg WHERE NOT tg.tgisinternal),
		  (SELECT string_agg(p.oid::regprocedure::text || ':' || p.prosecdef || ':' || COALESCE(p.proacl::text, ''), ',' ORDER BY p.oid)
		     FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace WHERE n.nspname = 'outbox'),
		  (SELECT string_agg(r.rolname, ',' ORDER BY r.rolname) FROM pg_roles r WHERE r.rolname LIKE 'pgdrain%'
		     AND r.rolname NOT LIKE 'pgdrain\_t\_%')))`).Scan(&h))
	parts = append(parts, "catalog="+h)
	return fmt.Sprint(parts)
}
