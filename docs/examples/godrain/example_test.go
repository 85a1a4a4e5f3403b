package godrain_test

import (
	"context"
	"fmt"
	"os"

	"github.com/jackc/pgx/v5"

	"github.com/pgdrain/pgdrain/internal/testdb"
)

// Example runs the Go example that docs/go.md and the README quote against a fresh database with
// pgdrain's migrations.
func Example() {
	ctx := context.Background()
	dsn, cleanup := freshDatabase(ctx)
	defer cleanup()
	if err := run(ctx, dsn); err != nil {
		fmt.Println("error:", err)
	}
	// Output:
	// first call: account.created -> 503
	// sent: 100, in commit order per account: true
}

// freshDatabase creates a migrated database on the server of DATABASE_URL and returns its URL
// and a function that drops it.
func freshDatabase(ctx context.Context) (string, func()) {
	server := os.Getenv("TEST_DATABASE_URL")
	if server == "" {
		server = os.Getenv("DATABASE_URL")
	}
	name := fmt.Sprintf("readme_example_%d", os.Getpid())
	admin, err := pgx.Connect(ctx, testdb.WithDatabase(server, "postgres"))
	if err != nil {
		panic(err)
	}
	defer admin.Close(ctx)
	if _, err := admin.Exec(ctx, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)"); err != nil {
		panic(err)
	}
	if _, err := admin.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		panic(err)
	}
	dsn := testdb.WithDatabase(server, name)
	if err := testdb.MigrateUp(ctx, dsn); err != nil {
		panic(err)
	}
	return dsn, func() {
		c, err := pgx.Connect(context.Background(), testdb.WithDatabase(server, "postgres"))
		if err != nil {
			return
		}
		defer c.Close(context.Background())
		_, _ = c.Exec(context.Background(), "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)")
	}
}
