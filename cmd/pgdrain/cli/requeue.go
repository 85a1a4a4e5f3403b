package cli

import (
	"context"
	"fmt"
	"strconv"
)

var requeueCommand = command{
	name: "requeue", minArgs: 1, maxArgs: -1,
	bind: noFlags(func(ctx context.Context, e env, args []string) error {
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
	}),
}
