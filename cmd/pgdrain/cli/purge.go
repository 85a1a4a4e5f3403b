package cli

import (
	"context"
	"flag"
	"fmt"
	"time"
)

var purgeCommand = command{
	name: "purge", minArgs: 1, maxArgs: 1,
	bind: func(fs *flag.FlagSet) (func() error, action) {
		olderThan := ageFlag{7 * 24 * time.Hour}
		fs.Var(&olderThan, "older-than", "delete rows sent more than this long ago")
		maxRows := fs.Int64("max-rows", 0, "delete at most this many rows in all (0 = no limit)")
		chunk := fs.Int("chunk", 5000, "rows per purge_sent call, each its own short transaction")
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
			return purge(ctx, e, args[0], olderThan.d, *maxRows, *chunk)
		}
	},
}

// purge calls outbox.purge_sent in chunks until it deletes nothing (or maxRows are gone). Each
// call is its own transaction on an autocommit connection, so no lock outlives one chunk and a
// running drainer never waits for the purge (purge_sent skips locked rows).
func purge(ctx context.Context, e env, queue string, olderThan time.Duration, maxRows int64, chunk int) error {
	var total int64
	chunks := 0
	for {
		size := int64(chunk)
		if maxRows > 0 {
			size = min(size, maxRows-total)
		}
		if size == 0 {
			break
		}
		var n int64
		if err := e.conn.QueryRow(ctx, `SELECT outbox.purge_sent($1, $2::interval, $3)`, queue, olderThan, size).Scan(&n); err != nil {
			return fmt.Errorf("purging sent rows (after %d deleted): %w", total, err)
		}
		if n == 0 {
			break
		}
		total += n
		chunks++
	}
	if e.json {
		return writeJSON(e.out, map[string]any{
			"queue": queue, "deleted": total, "chunks": chunks, "older_than_seconds": olderThan.Seconds()})
	}
	fmt.Fprintf(e.out, "deleted %d sent row(s) of %s older than %s in %d chunk(s)\n", total, queue, olderThan, chunks)
	return nil
}
