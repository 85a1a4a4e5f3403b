package cli

import (
	"context"
	"flag"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgdrain/pgdrain/internal/console/timetext"
	"github.com/pgdrain/pgdrain/internal/sqlrule"
)

// wedgedPartition is one row of outbox.wedged_partitions.
type wedgedPartition struct {
	PartitionKey     string    `json:"partition_key"`
	HeadID           int64     `json:"head_id"`
	HeadAttemptCount int       `json:"head_attempt_count"`
	HeadLastError    *string   `json:"head_last_error"`
	OldestPendingAt  time.Time `json:"oldest_pending_at"`
	Pending          int64     `json:"pending"`
	Reason           string    `json:"reason"`
}

var wedgedCommand = command{
	name: "wedged", minArgs: 1, maxArgs: 1,
	bind: func(fs *flag.FlagSet) (func() error, action) {
		olderThan := ageFlag{time.Minute}
		fs.Var(&olderThan, "older-than", "only partitions whose oldest pending row is older than this")
		limit := fs.Int("limit", 10, "at most this many partitions, oldest first")
		validate := func() error {
			if *limit < 1 || *limit > 10000 {
				return usagef("wedged: --limit must be between 1 and 10000, got %d", *limit)
			}
			return nil
		}
		return validate, func(ctx context.Context, e env, args []string) error {
			return wedged(ctx, e, args[0], olderThan.d, *limit)
		}
	},
}

func wedged(ctx context.Context, e env, queue string, olderThan time.Duration, limit int) error {
	// oldest_pending_at is a row's created_at, the producer's to write: 'infinity' failed the whole
	// listing in the scan; a time outside years 1 to 9999 is shown at the nearer bound.
	rows, err := e.conn.Query(ctx, `
			SELECT w.partition_key, w.head_id, w.head_attempt_count, w.head_last_error,
			       `+sqlrule.WithinYears1To9999("w.oldest_pending_at")+`, w.pending, w.reason
			FROM outbox.wedged_partitions($1, $2::interval, $3) w`,
		queue, olderThan, limit)
	if err != nil {
		return fmt.Errorf("reading wedged partitions: %w", err)
	}
	list, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (wedgedPartition, error) {
		var w wedgedPartition
		err := r.Scan(&w.PartitionKey, &w.HeadID, &w.HeadAttemptCount, &w.HeadLastError,
			&w.OldestPendingAt, &w.Pending, &w.Reason)
		w.OldestPendingAt = w.OldestPendingAt.UTC()
		w.Reason = timetext.Rewrite(w.Reason)
		return w, err
	})
	if err != nil {
		return fmt.Errorf("reading wedged partitions: %w", err)
	}
	if e.json {
		if list == nil {
			list = []wedgedPartition{}
		}
		if err := writeJSON(e.out, list); err != nil {
			return err
		}
	} else if len(list) == 0 {
		fmt.Fprintf(e.out, "no partition of %s has pending work older than %s\n", queue, ageText(olderThan))
	} else {
		table := make([][]string, len(list))
		for i, w := range list {
			table[i] = []string{w.PartitionKey, strconv.FormatInt(w.HeadID, 10), strconv.Itoa(w.HeadAttemptCount),
				strconv.FormatInt(w.Pending, 10), timeOrDash(&w.OldestPendingAt), w.Reason, orDash(w.HeadLastError)}
		}
		if err := writeTable(e.out, []string{"PARTITION", "HEAD_ID", "ATTEMPTS", "PENDING", "OLDEST_PENDING_AT", "REASON", "LAST_ERROR"}, table); err != nil {
			return err
		}
	}
	// outbox.wedged_partitions reads the partition heads: while claims rebuild them, a key no part
	// has reached is not listed, and "no partition" is not the whole truth. Said on stderr with
	// --json, whose stdout stays the list; a role that may not ask is told so there, and the list
	// stands.
	if progress, err := headsRebuild(ctx, e.conn, queue); err != nil {
		fmt.Fprintf(e.errOut, "note: %v\n", err)
	} else if progress != "" {
		note := e.out
		if e.json {
			note = e.errOut
		}
		fmt.Fprintf(note, "note: claims are rebuilding the partition heads of %s after a crash, a promotion or a "+
			"restore (%s): keys no part has reached yet are not listed\n", queue, progress)
	}
	if len(list) > 0 {
		return problemsFound
	}
	return nil
}
