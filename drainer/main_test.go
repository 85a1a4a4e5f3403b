package drainer_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgdrain/pgdrain/internal/testdb"
)

// TestMain gives the examples a freshly migrated database of their own on the test server
// (TEST_DATABASE_URL or DATABASE_URL) and points DATABASE_URL at it; it is dropped afterwards.
func TestMain(m *testing.M) {
	server := os.Getenv("TEST_DATABASE_URL")
	if server == "" {
		server = os.Getenv("DATABASE_URL")
	}
	if server == "" {
		fmt.Fprintln(os.Stderr, "drainer examples need PostgreSQL: set DATABASE_URL (make test starts a throwaway cluster and sets it)")
		os.Exit(1)
	}
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	name := "drainer_example_" + hex.EncodeToString(b)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	admin := func(sql string) error {
		c, err := pgx.Connect(ctx, testdb.WithDatabase(server, "postgres"))
		if err != nil {
			return err
		}
		defer c.Close(context.Background())
		_, err = c.Exec(ctx, sql)
		return err
	}
	dsn := testdb.WithDatabase(server, name)
	if err := admin("CREATE DATABASE " + name); err != nil {
		fmt.Fprintln(os.Stderr, "creating example database:", err)
		os.Exit(1)
	}
	code := 1
	if err := testdb.MigrateUp(ctx, dsn); err != nil {
		fmt.Fprintln(os.Stderr, "migrating example database:", err)
	} else {
		os.Setenv("DATABASE_URL", dsn)
		code = m.Run()
	}
	if err := admin("DROP DATABASE IF EXISTS " + name + " WITH (FORCE)"); err != nil {
		fmt.Fprintln(os.Stderr, "dropping example database:", err)
	}
	cancel()
	os.Exit(code)
}
