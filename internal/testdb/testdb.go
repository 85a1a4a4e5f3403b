// Package testdb gives each Go test its own freshly migrated PostgreSQL database.
//
// The server comes from TEST_DATABASE_URL or DATABASE_URL (make test starts a throwaway cluster
// and sets it). The first caller in any test process migrates a template database named after a
// hash of the embedded migrations; every test then gets CREATE DATABASE ... TEMPLATE, which is
// cheap, and the database is dropped when the test ends.
package testdb

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	_ "github.com/jackc/pgx/v5/stdlib"

	"github.com/pgdrain/pgdrain/migrations"
)

// ServerURL returns the URL of the test server, failing the test when none is configured.
func ServerURL(t testing.TB) string {
	t.Helper()
	for _, k := range []string{"TEST_DATABASE_URL", "DATABASE_URL"} {
		if v := os.Getenv(k); v != "" {
			return v
		}
	}
	t.Fatal("no PostgreSQL: set DATABASE_URL (make test starts a throwaway cluster and sets it)")
	return ""
}

// WithDatabase returns dsn with its database name replaced by name.
func WithDatabase(dsn, name string) string {
	u, err := url.Parse(dsn)
	if err != nil {
		panic(fmt.Sprintf("testdb: bad URL %q: %v", dsn, err))
	}
	u.Path = "/" + name
	return u.String()
}

var (
	templateOnce sync.Once
	templateName string
	templateErr  error
)

// Template returns the name of the migrated template database, creating it on first use.
func Template(t testing.TB) string {
	t.Helper()
	server := ServerURL(t)
	templateOnce.Do(func() { templateName, templateErr = ensureTemplate(server) })
	if templateErr != nil {
		t.Fatalf("preparing template database: %v", templateErr)
	}
	return templateName
}

// DB is one test's database.
type DB struct {
	Name string
	// URL connects to this database.
	URL  string
	Pool *pgxpool.Pool
}

// New creates a migrated database for t, dropped when t ends.
func New(t testing.TB) *DB {
	t.Helper()
	return fromTemplate(t, Template(t))
}

// NewEmpty creates an empty database (no migrations) for t, dropped when t ends.
func NewEmpty(t testing.TB) *DB {
	t.Helper()
	return fromTemplate(t, "template0")
}

// NewEncoded creates a migrated database for t whose server encoding is encoding, with the C
// locale, and whose sessions use client_encoding UTF8 (as a Go client means it: the server
// converts every text, and refuses one with a character the encoding lacks, SQLSTATE 22P05);
// dropped when t ends. It is migrated on creation (a template of another encoding cannot be
// cloned), so it costs more than New.
func NewEncoded(t testing.TB, encoding string) *DB {
	t.Helper()
	db := create(t, fmt.Sprintf("TEMPLATE template0 ENCODING %s LOCALE 'C'", pgx.Identifier{encoding}.Sanitize()))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if err := MigrateUp(ctx, db.URL); err != nil {
		t.Fatalf("migrating %s test database: %v", encoding, err)
	}
	if _, err := db.Pool.Exec(ctx, fmt.Sprintf("ALTER DATABASE %s SET client_encoding = 'UTF8'", pgx.Identifier{db.Name}.Sanitize())); err != nil {
		t.Fatalf("setting the client encoding of the %s test database: %v", encoding, err)
	}
	db.Pool.Reset() // the setting applies to new sessions
	return db
}

func fromTemplate(t testing.TB, template string) *DB {
	t.Helper()
	return create(t, "TEMPLATE "+pgx.Identifier{template}.Sanitize())
}

// create runs CREATE DATABASE <a fresh name> <options> and connects to it.
func create(t testing.TB, options string) *DB {
	t.Helper()
	server := ServerURL(t)
	name := "t_" + randomHex(6)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := admin(ctx, server, func(c *pgx.Conn) error {
		_, err := c.Exec(ctx, fmt.Sprintf("CREATE DATABASE %s %s", pgx.Identifier{name}.Sanitize(), options))
		return err
	}); err != nil {
		t.Fatalf("creating test database: %v", err)
	}
	dsn := WithDatabase(server, name)
	pool, err := pgxpool.New(ctx, dsn)
	if err != nil {
		t.Fatalf("connecting to test database: %v", err)
	}
	t.Cleanup(func() {
		pool.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		_ = admin(ctx, server, func(c *pgx.Conn) error {
			_, err := c.Exec(ctx, fmt.Sprintf("DROP DATABASE IF EXISTS %s WITH (FORCE)", pgx.Identifier{name}.Sanitize()))
			return err
		})
	})
	return &DB{Name: name, URL: dsn, Pool: pool}
}

func admin(ctx context.Context, server string, f func(*pgx.Conn) error) error {
	c, err := pgx.Connect(ctx, WithDatabase(server, "postgres"))
	if err != nil {
		return err
	}
	defer c.Close(context.Background())
	return f(c)
}

func ensureTemplate(server string) (string, error) {
	sum, err := migrationsHash()
	if err != nil {
		return "", err
	}
	name := "pgdrain_tmpl_" + sum[:12]
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	err = admin(ctx, server, func(c *pgx.Conn) error {
		// Test binaries of several packages run at once: one builds, the others wait.
		if _, err := c.Exec(ctx, "SELECT pg_advisory_lock(7340033)"); err != nil {
			return err
		}
		defer c.Exec(context.Background(), "SELECT pg_advisory_unlock(7340033)")
		var exists bool
		if err := c.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)", name).Scan(&exists); err != nil {
			return err
		}
		if exists {
			return nil
		}
		building := name + "_building"
		if _, err := c.Exec(ctx, fmt.Sprintf("DROP DATABASE IF EXISTS %s WITH (FORCE)", building)); err != nil {
			return err
		}
		if _, err := c.Exec(ctx, fmt.Sprintf("CREATE DATABASE %s TEMPLATE template0", building)); err != nil {
			return err
		}
		if err := MigrateUp(ctx, WithDatabase(server, building)); err != nil {
			return err
		}
		_, err := c.Exec(ctx, fmt.Sprintf("ALTER DATABASE %s RENAME TO %s", building, name))
		return err
	})
	return name, err
}

// MigrateUp applies every module's migrations to the database at dsn.
func MigrateUp(ctx context.Context, dsn string) error {
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		return err
	}
	defer db.Close()
	for _, m := range migrations.Modules {
		p, err := migrations.NewProvider(db, m)
		if err != nil {
			return err
		}
		if _, err := p.Up(ctx); err != nil {
			return fmt.Errorf("migrating module %s: %w", m.Name, err)
		}
	}
	return nil
}

func migrationsHash() (string, error) {
	h := sha256.New()
	err := fs.WalkDir(migrations.FS, ".", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := fs.ReadFile(migrations.FS, path)
		if err != nil {
			return err
		}
		fmt.Fprintf(h, "%s\x00%d\x00", path, len(b))
		h.Write(b)
		return nil
	})
	return hex.EncodeToString(h.Sum(nil)), err
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return strings.ToLower(hex.EncodeToString(b))
}
