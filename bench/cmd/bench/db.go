package main

import (
	"context"
	"fmt"
	"net/url"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgdrain/pgdrain/internal/testdb"
)

// withDatabase returns server with its database name replaced by name.
func withDatabase(server, name string) string {
	u, err := url.Parse(server)
	if err != nil {
		panic(err)
	}
	u.Path = "/" + name
	return u.String()
}

// freshDatabase (re)creates database name on the server, migrates it when migrate is set, and
// returns a pool of up to maxConns connections to it.
func freshDatabase(ctx context.Context, server, name string, migrate bool, maxConns int) (*pgxpool.Pool, error) {
	admin, err := pgx.Connect(ctx, withDatabase(server, "postgres"))
	if err != nil {
		return nil, err
	}
	defer admin.Close(ctx)
	id := pgx.Identifier{name}.Sanitize()
	if _, err := admin.Exec(ctx, "DROP DATABASE IF EXISTS "+id+" WITH (FORCE)"); err != nil {
		return nil, err
	}
	if _, err := admin.Exec(ctx, "CREATE DATABASE "+id); err != nil {
		return nil, err
	}
	dsn := withDatabase(server, name)
	if migrate {
		if err := testdb.MigrateUp(ctx, dsn); err != nil {
			return nil, fmt.Errorf("migrating %s: %w", name, err)
		}
	}
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return nil, err
	}
	cfg.MaxConns = int32(maxConns)
	return pgxpool.NewWithConfig(ctx, cfg)
}

func describeServer(ctx context.Context, server string, emit func(string)) error {
	c, err := pgx.Connect(ctx, server)
	if err != nil {
		return err
	}
	defer c.Close(ctx)
	var version, fsync, sc, sb string
	if err := c.QueryRow(ctx, `SELECT version(), current_setting('fsync'), current_setting('synchronous_commit'),
		current_setting('shared_buffers')`).Scan(&version, &fsync, &sc, &sb); err != nil {
		return err
	}
	emit(fmt.Sprintf("Server: %s; fsync=%s, synchronous_commit=%s, shared_buffers=%s. Client and server share the machine.\n\n",
		version, fsync, sc, sb))
	return nil
}
