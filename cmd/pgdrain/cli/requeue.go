package cli

import (
	"context"
	"flag"
	"fmt"
	"strconv"
	"strings"
)

// requeueCommand needs ids, --key or --all: requeueing every poisoned row is a deliberate act
// (each goes to the tail of its key), not what a forgotten argument should do. Ids change on
// requeue, so --key names a partition's poisoned rows without knowing them.
var requeueCommand = command{
	name: "requeue", minArgs: 1, maxArgs: -1,
	bind: func(fs *flag.FlagSet) (func() error, action) {
		all := fs.Bool("all", false, "requeue every poisoned row of the queue")
		key := fs.String("key", "", "requeue the poisoned rows of this partition key")
		validate := func() error {
			if flagGiven(fs, "key") && *key == "" {
				return usagef("requeue: --key must not be empty")
			}
			return nil
		}
		return validate, func(ctx context.Context, e env, args []string) error {
			return requeue(ctx, e, args, *all, *key)
		}
	},
}

func requeue(ctx context.Context, e env, args []string, all bool, key string) error {
	given := 0
	for _, b := range []bool{len(args) > 1, all, key != ""} {
		if b {
			given++
		}
	}
	switch {
	case given == 0:
		return usagef("requeue: give the ids to requeue, --key K for the poisoned rows of a key, or --all for every poisoned row")
	case given > 1:
		return usagef("requeue: give ids, --key or --all, only one of them")
	}
	queue := args[0]
	var ids []int64 // nil = every poisoned row
	for _, a := range args[1:] {
		id, err := strconv.ParseInt(a, 10, 64)
		if err != nil || id < 1 {
			return usagef("requeue: ID must be a positive integer, got %q", a)
		}
		ids = append(ids, id)
	}
	if key != "" {
		if err := needPartitioned(ctx, e.conn, queue, "requeue --key"); err != nil {
			return err
		}
		rows, err := readPoisoned(ctx, e.conn, queue, key, maxKeyRequeue)
		if err != nil {
			return err
		}
		if len(rows) == 0 {
			if e.json {
				return writeJSON(e.out, map[string]any{"queue": queue, "key": key, "ids": []int64{}, "requeued": 0})
			}
			fmt.Fprintf(e.out, "no poisoned row of key %q in %s: nothing requeued\n", key, queue)
			return nil
		}
		// Oldest first, as requeue_poisoned gives them new ids in the order of the old ones.
		for i := len(rows) - 1; i >= 0; i-- {
			ids = append(ids, rows[i].ID)
		}
	}
	var n int64
	if err := e.conn.QueryRow(ctx, `SELECT outbox.requeue_poisoned($1, $2::bigint[])`, queue, ids).Scan(&n); err != nil {
		return fmt.Errorf("requeueing poisoned rows: %w", err)
	}
	if e.json {
		out := map[string]any{"queue": queue, "requeued": n}
		if key != "" {
			out["key"], out["ids"] = key, ids
		}
		return writeJSON(e.out, out)
	}
	if key != "" {
		fmt.Fprintf(e.out, "requeued %d poisoned row(s) of key %q of %s (were ids %s)\n", n, key, queue, joinIDs(ids))
		return nil
	}
	fmt.Fprintf(e.out, "requeued %d poisoned row(s) of %s\n", n, queue)
	return nil
}

func joinIDs(ids []int64) string {
	parts := make([]string, len(ids))
	for i, id := range ids {
		parts[i] = strconv.FormatInt(id, 10)
	}
	return strings.Join(parts, ", ")
}
