package cli

import (
	"context"
	"flag"
	"fmt"
	"math"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgdrain/pgdrain/internal/sqlrule"
)

// The operators' row actions (outbox.poison_row, retry_row, dismiss_poisoned) and their log
// (outbox.operator_log). skip and retry are fenced by --attempts: the row's attempt count as
// `pgdrain wedged` (ATTEMPTS) or `pgdrain poisoned` showed it; a row that moved on since, or that a
// worker is delivering right now, is left alone and the command exits 1 saying so.

const (
	// maxReason is the longest --reason the SQL functions take.
	maxReason = 1000
	// maxDismiss bounds the ids of one dismiss (outbox.dismiss_poisoned takes at most 10000).
	maxDismiss = 10000
	// maxActions bounds `actions --limit` (outbox.operator_log returns at most 1000 rows).
	maxActions = 1000
)

var skipCommand = command{
	name: "skip", minArgs: 2, maxArgs: 2,
	bind: func(fs *flag.FlagSet) (func() error, action) {
		attempts := fs.Int("attempts", -1, "the row's attempt count as `pgdrain wedged` showed it (required)")
		reason := fs.String("reason", "", "why it is skipped (required; recorded with the row and in the log)")
		validate := func() error {
			if err := needAttempts("skip", fs, *attempts); err != nil {
				return err
			}
			return needReason("skip", *reason, true)
		}
		return validate, func(ctx context.Context, e env, args []string) error {
			return rowAction(ctx, e, "skip", args, *attempts, *reason)
		}
	},
}

var retryCommand = command{
	name: "retry", minArgs: 2, maxArgs: 2,
	bind: func(fs *flag.FlagSet) (func() error, action) {
		attempts := fs.Int("attempts", -1, "the row's attempt count as `pgdrain wedged` showed it (required)")
		reason := fs.String("reason", "", "why it is retried now (optional; recorded in the log)")
		validate := func() error {
			if err := needAttempts("retry", fs, *attempts); err != nil {
				return err
			}
			return needReason("retry", *reason, flagGiven(fs, "reason"))
		}
		return validate, func(ctx context.Context, e env, args []string) error {
			return rowAction(ctx, e, "retry", args, *attempts, *reason)
		}
	},
}

var dismissCommand = command{
	name: "dismiss", minArgs: 2, maxArgs: -1,
	bind: func(fs *flag.FlagSet) (func() error, action) {
		reason := fs.String("reason", "", "why they are dismissed (required; recorded with the rows and in the log)")
		validate := func() error { return needReason("dismiss", *reason, true) }
		return validate, func(ctx context.Context, e env, args []string) error {
			return dismiss(ctx, e, args, *reason)
		}
	},
}

var actionsCommand = command{
	name: "actions", minArgs: 1, maxArgs: 1,
	bind: func(fs *flag.FlagSet) (func() error, action) {
		limit := fs.Int("limit", 50, "list at most this many actions, newest first")
		validate := func() error {
			if *limit < 1 || *limit > maxActions {
				return usagef("actions: --limit must be between 1 and %d, got %d", maxActions, *limit)
			}
			return nil
		}
		return validate, func(ctx context.Context, e env, args []string) error {
			return actions(ctx, e, args[0], *limit)
		}
	},
}

func needAttempts(cmd string, fs *flag.FlagSet, attempts int) error {
	if !flagGiven(fs, "attempts") {
		return usagef("%s: --attempts N is required: the row's attempt count as `pgdrain wedged` or `pgdrain poisoned` showed it (a row that has moved on since is left alone)", cmd)
	}
	// attempt_count is an integer (int4) column: a count beyond it is no row's, and the database
	// (or pgx, before it) refused it with exit 3, naming args[2] or the type, not --attempts.
	if attempts < 0 || attempts > math.MaxInt32 {
		return usagef("%s: --attempts must be between 0 and %d (the row's attempt count), got %d", cmd, math.MaxInt32, attempts)
	}
	return nil
}

func needReason(cmd, reason string, required bool) error {
	if !required {
		return nil
	}
	if len([]rune(reason)) > maxReason || sqlrule.Blank(reason) {
		return usagef("%s: --reason must be a non-blank text of at most %d characters", cmd, maxReason)
	}
	return nil
}

func parseID(cmd, a string) (int64, error) {
	id, err := strconv.ParseInt(a, 10, 64)
	if err != nil || id < 1 {
		return 0, usagef("%s: ID must be a positive integer, got %q", cmd, a)
	}
	return id, nil
}

// rowAction runs skip (outbox.poison_row) or retry (outbox.retry_row) on one row.
func rowAction(ctx context.Context, e env, cmd string, args []string, attempts int, reason string) error {
	queue := args[0]
	id, err := parseID(cmd, args[1])
	if err != nil {
		return err
	}
	var reasonArg *string
	if reason != "" {
		reasonArg = &reason
	}
	var done bool
	sql, verb, result := `SELECT outbox.poison_row($1, $2, $3, $4)`, "skipping", "skipped"
	if cmd == "retry" {
		sql, verb, result = `SELECT outbox.retry_row($1, $2, $3, $4)`, "retrying", "retried"
	}
	if err := e.conn.QueryRow(ctx, sql, queue, id, attempts, reasonArg).Scan(&done); err != nil {
		return fmt.Errorf("%s row %d: %w", verb, id, err)
	}
	if e.json {
		if err := writeJSON(e.out, map[string]any{"queue": queue, "id": id, "attempts": attempts, result: done}); err != nil {
			return err
		}
	} else if done && cmd == "skip" {
		fmt.Fprintf(e.out, "skipped row %d of %s: poisoned (%s); its key moves on, and `pgdrain requeue` delivers it later, at the tail of its key\n",
			id, queue, reason)
	} else if done {
		fmt.Fprintf(e.out, "retried row %d of %s: its backoff is over, the next claim takes it\n", id, queue)
	} else {
		state := "pending with"
		if cmd == "retry" {
			state = "backing off with"
		}
		fmt.Fprintf(e.out, "row %d of %s was not %s: it is no longer %s %d attempts, or a worker is delivering it right now (pgdrain wedged shows it as it is now)\n",
			id, queue, result, state, attempts)
	}
	if !done {
		return problemsFound
	}
	return nil
}

func dismiss(ctx context.Context, e env, args []string, reason string) error {
	queue := args[0]
	if len(args)-1 > maxDismiss {
		return usagef("dismiss: at most %d ids at a time, got %d", maxDismiss, len(args)-1)
	}
	// Each row once, in the order first given: an id given twice is one row, and the count of rows
	// dismissed is compared with the rows asked for (1 of 2 was a done dismissal read as exit 1).
	var ids []int64
	seen := map[int64]bool{}
	for _, a := range args[1:] {
		id, err := parseID("dismiss", a)
		if err != nil {
			return err
		}
		if !seen[id] {
			seen[id] = true
			ids = append(ids, id)
		}
	}
	var n int64
	if err := e.conn.QueryRow(ctx, `SELECT outbox.dismiss_poisoned($1, $2::bigint[], $3)`, queue, ids, reason).Scan(&n); err != nil {
		return fmt.Errorf("dismissing poisoned rows: %w", err)
	}
	if e.json {
		if err := writeJSON(e.out, map[string]any{"queue": queue, "ids": ids, "dismissed": n}); err != nil {
			return err
		}
	} else {
		fmt.Fprintf(e.out, "dismissed %d of %d row(s) of %s for good (kept as history, never delivered)", n, len(ids), queue)
		if n < int64(len(ids)) {
			fmt.Fprint(e.out, "; the others are not poisoned (any more) or a worker is delivering them right now")
		}
		fmt.Fprintln(e.out)
	}
	if n < int64(len(ids)) {
		return problemsFound
	}
	return nil
}

// actionRow is one row of outbox.operator_log.
type actionRow struct {
	ActionID     int64     `json:"action_id"`
	ActedAt      time.Time `json:"acted_at"`
	Action       string    `json:"action"`
	ID           int64     `json:"id"`
	EventID      *string   `json:"event_id"`
	PartitionKey *string   `json:"partition_key"`
	AttemptCount int       `json:"attempt_count"`
	Reason       *string   `json:"reason"`
	ActedBy      string    `json:"acted_by"`
}

func actions(ctx context.Context, e env, queue string, limit int) error {
	rows, err := e.conn.Query(ctx, `
		SELECT a.action_id, a.acted_at, a.action, a.id, a.event_id::text, a.partition_key, a.attempt_count, a.reason, a.acted_by
		FROM outbox.operator_log($1, $2) a`, queue, limit)
	if err != nil {
		return fmt.Errorf("reading the operators' log: %w", err)
	}
	list, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (actionRow, error) {
		var a actionRow
		err := r.Scan(&a.ActionID, &a.ActedAt, &a.Action, &a.ID, &a.EventID, &a.PartitionKey, &a.AttemptCount, &a.Reason, &a.ActedBy)
		a.ActedAt = a.ActedAt.UTC()
		return a, err
	})
	if err != nil {
		return fmt.Errorf("reading the operators' log: %w", err)
	}
	if e.json {
		if list == nil {
			list = []actionRow{}
		}
		return writeJSON(e.out, list)
	}
	if len(list) == 0 {
		fmt.Fprintf(e.out, "no operator action on %s\n", queue)
		return nil
	}
	table := make([][]string, len(list))
	for i, a := range list {
		table[i] = []string{timeOrDash(&a.ActedAt), a.ActedBy, a.Action, strconv.FormatInt(a.ID, 10), orDash(a.PartitionKey),
			strconv.Itoa(a.AttemptCount), orDash(a.EventID), orDash(a.Reason)}
	}
	return writeTable(e.out, []string{"AT", "BY", "ACTION", "ID", "KEY", "ATTEMPTS", "EVENT_ID", "REASON"}, table)
}
