package cli

import (
	"context"
	"flag"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

var purgeCommand = command{
	name: "purge", minArgs: 1, maxArgs: 1,
	bind: func(fs *flag.FlagSet) (func() error, action) {
		olderThan := ageFlag{7 * 24 * time.Hour}
		fs.Var(&olderThan, "older-than", "delete rows sent more than this long ago")
		maxRows := fs.Int64("max-rows", 0, "delete at most this many rows in all (0 = no limit)")
		chunk := fs.Int("chunk", 5000, "rows per purge_sent call, each its own short transaction")
		dryRun := fs.Bool("dry-run", false, "report how many rows would be deleted; delete nothing")
		validate := func() error {
			if *maxRows < 0 {
				return usagef("purge: --max-rows must be 0 (no limit) or more, got %d", *maxRows)
			}
			if *chunk < 1 || *chunk > 1000000 {
				return usagef("purge: --chunk must be between 1 and 1000000, got %d", *chunk)
			}
			return nil
		}
		return validate, func(ctx context.Context, e env, args []string) error {
			if *dryRun {
				return purgeDryRun(ctx, e, args[0], olderThan.d, *maxRows, *chunk)
			}
			return purge(ctx, e, args[0], olderThan.d, *maxRows, *chunk)
		}
	},
}

// purge calls outbox.purge_sent in chunks until it deletes nothing (or maxRows are gone). Each
// call is its own transaction on an autocommit connection, so no lock outlives one chunk and a
// running drainer never waits for the purge (purge_sent skips locked rows).
func purge(ctx context.Context, e env, queue string, olderThan time.Duration, maxRows int64, chunk int) error {
	total, chunks, err := purgeChunks(ctx, e.conn, queue, olderThan, maxRows, chunk)
	if err != nil {
		return err
	}
	if e.json {
		return writeJSON(e.out, map[string]any{
			"queue": queue, "deleted": total, "chunks": chunks, "older_than": ageText(olderThan),
			"older_than_seconds": olderThan.Seconds()})
	}
	fmt.Fprintf(e.out, "deleted %d sent row(s) of %s older than %s in %d chunk(s)\n", total, queue, ageText(olderThan), chunks)
	return nil
}

// purgeDryRun runs the very purge (the same outbox.purge_sent calls, so the same predicate, chunks
// and --max-rows bound) in one transaction and rolls it back: the count is exact and nothing is
// deleted. The rows stay locked until the rollback; sent rows are never claimed, so drainers do not
// wait for them (a concurrent real purge skips them).
func purgeDryRun(ctx context.Context, e env, queue string, olderThan time.Duration, maxRows int64, chunk int) error {
	tx, err := e.conn.Begin(ctx)
	if err != nil {
		return fmt.Errorf("starting the dry-run transaction: %w", err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	total, chunks, err := purgeChunks(ctx, tx, queue, olderThan, maxRows, chunk)
	if err != nil {
		return fmt.Errorf("dry run, rolled back: %w", err)
	}
	if err := tx.Rollback(ctx); err != nil {
		return fmt.Errorf("rolling back the dry run: %w", err)
	}
	if e.json {
		return writeJSON(e.out, map[string]any{"queue": queue, "dry_run": true, "would_delete": total,
			"chunks": chunks, "older_than": ageText(olderThan), "older_than_seconds": olderThan.Seconds()})
	}
	fmt.Fprintf(e.out, "would delete %d sent row(s) of %s older than %s in %d chunk(s) (dry run: nothing deleted)\n",
		total, queue, ageText(olderThan), chunks)
	return nil
}

// purgeChunks calls outbox.purge_sent with chunk (at most what is left of maxRows) until a call
// deletes nothing, and returns the rows deleted and the calls that deleted some.
func purgeChunks(ctx context.Context, db interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}, queue string, olderThan time.Duration, maxRows int64, chunk int) (total int64, chunks int, err error) {
	for {
		size := int64(chunk)
		if maxRows > 0 {
			size = min(size, maxRows-total)
		}
		if size == 0 {
			return total, chunks, nil
		}
		var n int64
		if err := db.QueryRow(ctx, `SELECT outbox.purge_sent($1, $2::interval, $3)`, queue, olderThan, size).Scan(&n); err != nil {
			return total, chunks, fmt.Errorf("purging sent rows (after %d deleted): %w", total, err)
		}
		if n == 0 {
			return total, chunks, nil
		}
		total += n
		chunks++
	}
}
