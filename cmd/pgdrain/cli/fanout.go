package cli

import (
	"context"
	"flag"
	"fmt"

	"github.com/pgdrain/pgdrain/relay"
)

var fanoutCommand = command{
	name: "fanout", minArgs: 3, maxArgs: 3,
	bind: func(fs *flag.FlagSet) (func() error, action) {
		from := fs.String("from", "now", "where the sink starts: now, or oldest (also every retained sent event)")
		var start relay.FanOutStart
		var args []string
		validate := func() error {
			switch *from {
			case "now":
				start = relay.FromNow
			case "oldest":
				start = relay.FromOldest
			default:
				return usagef("fanout: --from must be now or oldest, got %q", *from)
			}
			return nil
		}
		return validate, func(ctx context.Context, e env, a []string) error {
			args = a
			if args[0] != "add" {
				return usagef("fanout: unknown subcommand %q (fanout add QUEUE SINK [--from now|oldest])", args[0])
			}
			if problem := relay.CheckFanOutSink(args[1], args[2]); problem != "" {
				return usagef("fanout add: SINK %s", problem)
			}
			return fanoutAdd(ctx, e, args[1], args[2], start)
		}
	},
}

// fanoutAdd creates the queue of a new sink of a fanned-out queue (relay.AddFanOutSink).
func fanoutAdd(ctx context.Context, e env, queue, sink string, start relay.FanOutStart) error {
	copied, err := relay.AddFanOutSink(ctx, e.conn, queue, sink, start)
	if err != nil {
		return err
	}
	target := relay.FanOutQueue(queue, sink)
	if e.json {
		return writeJSON(e.out, map[string]any{"queue": queue, "sink": sink, "sink_queue": target,
			"from": start.String(), "copied": copied})
	}
	fmt.Fprintf(e.out, "sink %s of %s: queue %s created, from %s", sink, queue, target, start)
	if start == relay.FromOldest {
		fmt.Fprintf(e.out, " (%d retained event(s) copied)", copied)
	}
	fmt.Fprintln(e.out)
	return nil
}
