package cli

import (
	"context"
	"flag"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgdrain/pgdrain/internal/sqlrule"
)

// poisonedRow is one row of outbox.poisoned_rows.
type poisonedRow struct {
	ID           int64     `json:"id"`
	EventID      string    `json:"event_id"`
	EventType    string    `json:"event_type"`
	PartitionKey *string   `json:"partition_key"`
	AttemptCount int       `json:"attempt_count"`
	LastError    *string   `json:"last_error"`
	CreatedAt    time.Time `json:"created_at"`
	// PayloadPreview is the payload's first 200 characters, or null for a login that may not read
	// the payload column (pgdrain_operator may not).
	PayloadPreview *string `json:"payload_preview"`
}

const (
	// poisonedPage is the most rows one outbox.poisoned_rows call returns.
	poisonedPage = 1000
	// maxPoisonedList bounds --limit.
	maxPoisonedList = 100000
	// maxKeyRequeue bounds `requeue --key`: the ids are read first, then requeued in one call.
	maxKeyRequeue = 10000
)

var poisonedCommand = command{
	name: "poisoned", minArgs: 1, maxArgs: 1,
	bind: func(fs *flag.FlagSet) (func() error, action) {
		limit := fs.Int("limit", 50, "list at most this many rows, newest first")
		key := fs.String("key", "", "only the rows of this partition key")
		validate := func() error {
			if *limit < 1 || *limit > maxPoisonedList {
				return usagef("poisoned: --limit must be between 1 and %d, got %d", maxPoisonedList, *limit)
			}
			if flagGiven(fs, "key") && *key == "" {
				return usagef("poisoned: --key must not be empty")
			}
			return nil
		}
		return validate, func(ctx context.Context, e env, args []string) error {
			return poisoned(ctx, e, args[0], *key, *limit)
		}
	},
}

func poisoned(ctx context.Context, e env, queue, key string, limit int) error {
	if key != "" {
		if err := needPartitioned(ctx, e.conn, queue, "poisoned --key"); err != nil {
			return err
		}
	}
	list, err := readPoisoned(ctx, e.conn, queue, key, limit)
	if err != nil {
		return err
	}
	if e.json {
		if list == nil {
			list = []poisonedRow{}
		}
		if err := writeJSON(e.out, list); err != nil {
			return err
		}
	} else if len(list) == 0 {
		if key != "" {
			fmt.Fprintf(e.out, "no poisoned row of key %q in %s\n", key, queue)
		} else {
			fmt.Fprintf(e.out, "no poisoned row in %s\n", queue)
		}
	} else {
		table := make([][]string, len(list))
		for i, p := range list {
			table[i] = []string{strconv.FormatInt(p.ID, 10), orDash(p.PartitionKey), p.EventType,
				strconv.Itoa(p.AttemptCount), timeOrDash(&p.CreatedAt), p.EventID, orDash(p.LastError)}
		}
		if err := writeTable(e.out, []string{"ID", "KEY", "EVENT_TYPE", "ATTEMPTS", "CREATED_AT", "EVENT_ID", "LAST_ERROR"}, table); err != nil {
			return err
		}
	}
	if len(list) > 0 {
		return problemsFound
	}
	return nil
}

// readPoisoned pages through outbox.poisoned_rows (granted to pgdrain_operator and
// pgdrain_reader; newest first, through the claim index) until limit rows of key ("" = any) are
// found or the queue has no more. Filtering by key walks the queue's poisoned rows, not its backlog.
func readPoisoned(ctx context.Context, conn *pgx.Conn, queue, key string, limit int) ([]poisonedRow, error) {
	var list []poisonedRow
	var before *int64
	for len(list) < limit {
		size := poisonedPage
		if key == "" {
			size = min(size, limit-len(list))
		}
		// created_at is the producer's to write: 'infinity' (or NULL, on an adopted table) failed the
		// whole listing in the scan; a time outside years 1 to 9999 is shown at the nearer bound.
		rows, err := conn.Query(ctx, `
			SELECT p.id, p.event_id::text, p.event_type, p.partition_key, p.attempt_count, p.last_error,
			       `+sqlrule.WithinYears1To9999("p.created_at")+`, p.payload_preview
			FROM outbox.poisoned_rows($1, $2, $3) p`, queue, size, before)
		if err != nil {
			return nil, fmt.Errorf("reading poisoned rows: %w", err)
		}
		page, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (poisonedRow, error) {
			var p poisonedRow
			err := r.Scan(&p.ID, &p.EventID, &p.EventType, &p.PartitionKey, &p.AttemptCount, &p.LastError,
				&p.CreatedAt, &p.PayloadPreview)
			p.CreatedAt = p.CreatedAt.UTC()
			return p, err
		})
		if err != nil {
			return nil, fmt.Errorf("reading poisoned rows: %w", err)
		}
		for _, p := range page {
			if before == nil || p.ID < *before {
				before = &p.ID
			}
			if (key == "" || (p.PartitionKey != nil && *p.PartitionKey == key)) && len(list) < limit {
				list = append(list, p)
			}
		}
		if len(page) < size {
			break
		}
	}
	return list, nil
}

// needPartitioned refuses a --key on a queue without a partition column (outbox.queue_info,
// granted to operators), so that "no row of that key" is never the answer to a wrong queue.
func needPartitioned(ctx context.Context, conn *pgx.Conn, queue, what string) error {
	var column *string
	if err := conn.QueryRow(ctx, `SELECT q.partition_column FROM outbox.queue_info($1) q`, queue).Scan(&column); err != nil {
		return fmt.Errorf("reading the queue's registration: %w", err)
	}
	if column == nil {
		return usagef("%s: queue %s has no partition column, so no keys", what, queue)
	}
	return nil
}

// flagGiven reports whether the command line set the flag name (also to its zero value).
func flagGiven(fs *flag.FlagSet, name string) bool {
	given := false
	fs.Visit(func(f *flag.Flag) { given = given || f.Name == name })
	return given
}
