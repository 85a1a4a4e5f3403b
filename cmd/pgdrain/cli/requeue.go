package cli

import (
	"context"
	"flag"
	"fmt"
	"strconv"
)

// requeueCommand needs ids or --all: requeueing every poisoned row is a deliberate act (each goes to
// the tail of its key), not what a forgotten argument should do.
var requeueCommand = command{
	name: "requeue", minArgs: 1, maxArgs: -1,
	bind: func(fs *flag.FlagSet) (func() error, action) {
		all := fs.Bool("all", false, "requeue every poisoned row of the queue")
		return func() error { return nil }, func(ctx context.Context, e env, args []string) error {
			return requeue(ctx, e, args, *all)
		}
	},
}

func requeue(ctx context.Context, e env, args []string, all bool) error {
	switch {
	case len(args) == 1 && !all:
		return usagef("requeue: give the ids to requeue, or --all for every poisoned row")
	case len(args) > 1 && all:
		return usagef("requeue: give ids or --all, not both")
	}
	var ids []int64 // nil = every poisoned row
	for _, a := range args[1:] {
		id, err := strconv.ParseInt(a, 10, 64)
		if err != nil || id < 1 {
			return usagef("requeue: ID must be a positive integer, got %q", a)
		}
		ids = append(ids, id)
	}
	var n int64
	if err := e.conn.QueryRow(ctx, `SELECT outbox.requeue_poisoned($1, $2::bigint[])`, args[0], ids).Scan(&n); err != nil {
		return fmt.Errorf("requeueing poisoned rows: %w", err)
	}
	if e.json {
		return writeJSON(e.out, map[string]any{"queue": args[0], "requeued": n})
	}
	fmt.Fprintf(e.out, "requeued %d poisoned row(s) of %s\n", n, args[0])
	return nil
}
