// Package readcommitted runs pgdrain's own statements in READ COMMITTED transactions whatever the
// isolation a pool's connections begin with.
//
// pgdrain's claims, results and leases lock rows that other sessions update all the time; READ
// COMMITTED follows such a row to its newest version, REPEATABLE READ and SERIALIZABLE fail with
// 40001 instead. A database or role set to `default_transaction_isolation = 'serializable'` (a
// setting some teams choose for their business code) made every drainer replica fail and back off
// on most of its claims and results. Where the connections default to READ COMMITTED, statements go
// to the pool as they are; otherwise each runs in its own `BEGIN ISOLATION LEVEL READ COMMITTED`
// transaction (two more round trips), and transactions always begin with that level.
package readcommitted

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// DB sends statements to a pool in READ COMMITTED. Until Check has found the connections'
// default, statements go as they are.
type DB struct {
	pool     *pgxpool.Pool
	explicit atomic.Bool // the connections begin in another level: wrap every statement
}

// New wraps pool.
func New(pool *pgxpool.Pool) *DB {
	return &DB{pool: pool}
}

var readCommitted = pgx.TxOptions{IsoLevel: pgx.ReadCommitted}

// Check reads the isolation the pool's connections begin transactions in
// (default_transaction_isolation, as the server resolves it for their role and database) and
// returns it. Any other than READ COMMITTED makes every later statement run in a transaction of
// its own that says READ COMMITTED.
func (db *DB) Check(ctx context.Context) (string, error) {
	var level string
	if err := db.pool.QueryRow(ctx, `SELECT pg_catalog.current_setting('default_transaction_isolation')`).Scan(&level); err != nil {
		return "", fmt.Errorf("reading default_transaction_isolation: %w", err)
	}
	db.explicit.Store(level != "read committed")
	return level, nil
}

// Explicit reports whether statements run in transactions of their own (the connections begin in
// another isolation level).
func (db *DB) Explicit() bool { return db.explicit.Load() }

// Recheck is told of a failed statement: a serialization failure (40001) while statements go to
// the pool as they are means a connection began in another level than Check saw (the database's
// or role's default changed under a running client, and a new connection took it: READ COMMITTED
// never raises one on pgdrain's statements). From then on every statement runs in a READ COMMITTED
// transaction of its own. It reports whether it switched.
func (db *DB) Recheck(err error) bool {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != "40001" {
		return false
	}
	return db.explicit.CompareAndSwap(false, true)
}

// Begin starts a READ COMMITTED transaction.
func (db *DB) Begin(ctx context.Context) (pgx.Tx, error) {
	return db.pool.BeginTx(ctx, readCommitted)
}

// Exec runs one statement in READ COMMITTED.
func (db *DB) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	if !db.Explicit() {
		return db.pool.Exec(ctx, sql, args...)
	}
	var tag pgconn.CommandTag
	err := pgx.BeginTxFunc(ctx, db.pool, readCommitted, func(tx pgx.Tx) error {
		var err error
		tag, err = tx.Exec(ctx, sql, args...)
		return err
	})
	return tag, err
}

// Query runs one statement in READ COMMITTED. Its transaction commits when the rows are read to
// the end or closed without an error (Err then says whether the commit failed), and rolls back
// otherwise.
func (db *DB) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	if !db.Explicit() {
		return db.pool.Query(ctx, sql, args...)
	}
	tx, err := db.pool.BeginTx(ctx, readCommitted)
	if err != nil {
		return nil, err
	}
	rows, err := tx.Query(ctx, sql, args...)
	if err != nil {
		_ = tx.Rollback(context.WithoutCancel(ctx))
		return nil, err
	}
	return &txRows{Rows: rows, end: func(failed bool) error { return end(ctx, tx, failed) }}, nil
}

// QueryRow runs one statement in READ COMMITTED; the row's Scan ends its transaction.
func (db *DB) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	if !db.Explicit() {
		return db.pool.QueryRow(ctx, sql, args...)
	}
	return &txRow{db: db, ctx: ctx, sql: sql, args: args}
}

// SendBatch runs a batch in one READ COMMITTED transaction, which ends when the results are
// closed: committed when every statement succeeded.
func (db *DB) SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults {
	if !db.Explicit() {
		return db.pool.SendBatch(ctx, b)
	}
	tx, err := db.pool.BeginTx(ctx, readCommitted)
	if err != nil {
		return failedBatch{err}
	}
	return &txBatch{BatchResults: tx.SendBatch(ctx, b), end: func(failed bool) error { return end(ctx, tx, failed) }}
}

// end commits tx, or rolls it back when the statement failed (the rollback's own error is of no
// interest: the statement's is returned).
func end(ctx context.Context, tx pgx.Tx, failed bool) error {
	if failed {
		_ = tx.Rollback(context.WithoutCancel(ctx))
		return nil
	}
	return tx.Commit(ctx)
}

type txRows struct {
	pgx.Rows
	end    func(failed bool) error
	ended  bool
	endErr error
}

func (r *txRows) finish() {
	if r.ended {
		return
	}
	r.ended = true
	r.Rows.Close()
	r.endErr = r.end(r.Rows.Err() != nil)
}

func (r *txRows) Next() bool {
	if r.ended {
		return false
	}
	if r.Rows.Next() {
		return true
	}
	r.finish()
	return false
}

func (r *txRows) Close() { r.finish() }

func (r *txRows) Err() error {
	if err := r.Rows.Err(); err != nil {
		return err
	}
	return r.endErr
}

type txRow struct {
	db   *DB
	ctx  context.Context
	sql  string
	args []any
}

func (r *txRow) Scan(dest ...any) error {
	rows, err := r.db.Query(r.ctx, r.sql, r.args...)
	if err != nil {
		return err
	}
	defer rows.Close()
	if !rows.Next() {
		if err := rows.Err(); err != nil {
			return err
		}
		return pgx.ErrNoRows
	}
	if err := rows.Scan(dest...); err != nil {
		return err
	}
	rows.Close()
	return rows.Err()
}

type txBatch struct {
	pgx.BatchResults
	end    func(failed bool) error
	failed bool
}

func (b *txBatch) Exec() (pgconn.CommandTag, error) {
	tag, err := b.BatchResults.Exec()
	b.failed = b.failed || err != nil
	return tag, err
}

func (b *txBatch) QueryRow() pgx.Row {
	return batchRow{b}
}

type batchRow struct{ b *txBatch }

func (r batchRow) Scan(dest ...any) error {
	err := r.b.BatchResults.QueryRow().Scan(dest...)
	r.b.failed = r.b.failed || err != nil && err != pgx.ErrNoRows
	return err
}

func (b *txBatch) Query() (pgx.Rows, error) {
	rows, err := b.BatchResults.Query()
	b.failed = b.failed || err != nil
	return rows, err
}

func (b *txBatch) Close() error {
	err := b.BatchResults.Close()
	if endErr := b.end(b.failed || err != nil); err == nil {
		err = endErr
	}
	return err
}

type failedBatch struct{ err error }

func (f failedBatch) Exec() (pgconn.CommandTag, error) { return pgconn.CommandTag{}, f.err }
func (f failedBatch) Query() (pgx.Rows, error)         { return nil, f.err }
func (f failedBatch) QueryRow() pgx.Row                { return errRow{f.err} }
func (f failedBatch) Close() error                     { return f.err }
func (f failedBatch) Tx() pgx.Tx                       { return nil }

type errRow struct{ err error }

func (r errRow) Scan(...any) error { return r.err }
