package main

import (
	"context"
	"database/sql"
	"fmt"
	"net/url"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	_ "github.com/jackc/pgx/v5/stdlib"

	"github.com/pgdrain/pgdrain/migrations"
)

// demoDatabase is the database the demo creates (afresh) on the server of DATABASE_URL, so that
// it never writes into the database it was pointed at.
const demoDatabase = "pgdrain_demo"

// queueName is the demo's partitioned queue; partitionColumn is its order key.
const (
	queueName       = "demo.events"
	partitionColumn = "account_id"
)

// freshDatabase drops and creates demoDatabase on the server of serverURL and returns its URL.
func freshDatabase(ctx context.Context, serverURL string) (string, error) {
	conn, err := pgx.Connect(ctx, serverURL)
	if err != nil {
		return "", fmt.Errorf("connecting to %s: %w", redact(serverURL), err)
	}
	defer conn.Close(context.Background())
	name := pgx.Identifier{demoDatabase}.Sanitize()
	if _, err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)"); err != nil {
		return "", fmt.Errorf("dropping the previous demo database: %w", err)
	}
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		return "", fmt.Errorf("creating the demo database: %w", err)
	}
	u, err := url.Parse(serverURL)
	if err != nil {
		return "", fmt.Errorf("parsing DATABASE_URL: %w", err)
	}
	u.Path = "/" + demoDatabase
	return u.String(), nil
}

// migrate applies every module's embedded migrations, as cmd/goose-run up does.
func migrate(ctx context.Context, dsn string) ([]string, error) {
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		return nil, fmt.Errorf("opening database: %w", err)
	}
	defer db.Close()
	var applied []string
	for _, m := range migrations.Modules {
		p, err := migrations.NewProvider(db, m)
		if err != nil {
			return nil, err
		}
		results, err := p.Up(ctx)
		if err != nil {
			return nil, fmt.Errorf("migrating module %s: %w", m.Name, err)
		}
		for _, r := range results {
			applied = append(applied, m.Name+"/"+r.Source.Path)
		}
	}
	return applied, nil
}

// createSchema creates the demo's business table and its partitioned queue. Backoff is short so
// the demo's 10% transient failures retry within a run of seconds.
func createSchema(ctx context.Context, pool *pgxpool.Pool, keys int) error {
	_, err := pool.Exec(ctx, `
		CREATE SCHEMA demo;
		CREATE TABLE demo.accounts (
		  account_id text PRIMARY KEY,
		  balance bigint NOT NULL DEFAULT 0,
		  version integer NOT NULL DEFAULT 0);
		SELECT outbox.create_queue('demo.events', partition_column => 'account_id',
		                           backoff_min => '50 milliseconds', backoff_max => '1 second');`)
	if err != nil {
		return fmt.Errorf("creating the demo schema and queue: %w", err)
	}
	_, err = pool.Exec(ctx, `INSERT INTO demo.accounts (account_id)
		SELECT 'acct-' || lpad(g::text, 3, '0') FROM generate_series(0, $1 - 1) g`, keys)
	if err != nil {
		return fmt.Errorf("creating accounts: %w", err)
	}
	return nil
}

func newPool(ctx context.Context, dsn string, maxConns int32) (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return nil, err
	}
	cfg.MaxConns = maxConns
	cfg.ConnConfig.RuntimeParams["application_name"] = "pgdrain-demo"
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	pool, err := pgxpool.NewWithConfig(pctx, cfg)
	if err != nil {
		return nil, err
	}
	if err := pool.Ping(pctx); err != nil {
		pool.Close()
		return nil, err
	}
	return pool, nil
}

// redact hides a password in a URL for messages.
func redact(dsn string) string {
	u, err := url.Parse(dsn)
	if err != nil {
		return "(DATABASE_URL)"
	}
	return u.Redacted()
}
