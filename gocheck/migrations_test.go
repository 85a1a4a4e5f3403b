package gocheck

import (
	"context"
	"database/sql"
	"testing"

	_ "github.com/jackc/pgx/v5/stdlib"
	"github.com/stretchr/testify/require"

	"github.com/pgdrain/pgdrain/internal/testdb"
	"github.com/pgdrain/pgdrain/migrations"
)

// Test_Migrations_RoundTrip applies every module, checks nothing is pending, migrates every
// module down to zero (catching broken Down sections and StatementBegin blocks goose parses only
// when it runs them) and up again.
func Test_Migrations_RoundTrip(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testdb.NewEmpty(t)
	conn, err := sql.Open("pgx", db.URL)
	require.NoError(t, err)
	defer conn.Close()

	up := func() {
		for _, m := range migrations.Modules {
			p, err := migrations.NewProvider(conn, m)
			require.NoError(t, err)
			_, err = p.Up(ctx)
			require.NoError(t, err, "module %s up", m.Name)
			pending, err := p.HasPending(ctx)
			require.NoError(t, err)
			require.False(t, pending, "module %s has pending migrations after up", m.Name)
		}
	}
	up()
	for i := len(migrations.Modules) - 1; i >= 0; i-- {
		m := migrations.Modules[i]
		p, err := migrations.NewProvider(conn, m)
		require.NoError(t, err)
		_, err = p.DownTo(ctx, 0)
		require.NoError(t, err, "module %s down to 0", m.Name)
		v, err := p.GetDBVersion(ctx)
		require.NoError(t, err)
		require.Zero(t, v, "module %s version after down-to 0", m.Name)
	}
	var left int
	require.NoError(t, conn.QueryRowContext(ctx,
		`SELECT count(*) FROM pg_namespace WHERE nspname IN ('outbox', 'alr')`).Scan(&left))
	require.Zero(t, left, "schemas left behind after every module went down to 0")
	up()
}
