package cli

import (
	"context"
	"fmt"
	"strconv"
	"time"
)

// queueStats is the row of outbox.stats.
type queueStats struct {
	Queue                   string     `json:"queue"`
	Pending                 int64      `json:"pending"`
	Ready                   int64      `json:"ready"`
	Leased                  int64      `json:"leased"`
	BackingOff              int64      `json:"backing_off"`
	Poisoned                int64      `json:"poisoned"`
	OldestPendingAt         *time.Time `json:"oldest_pending_at"`
	OldestPendingAgeSeconds *float64   `json:"oldest_pending_age_seconds"`
	// HeadsRebuild is how far claims are in rebuilding the partition heads after a crash, a
	// promotion or a restore (outbox.heads_rebuild): null when they are not. Meanwhile keys no part
	// has reached count as pending and ready but wait for their part.
	HeadsRebuild *string `json:"heads_rebuild"`
}

var statsCommand = command{
	name: "stats", minArgs: 1, maxArgs: 1,
	bind: noFlags(func(ctx context.Context, e env, args []string) error {
		s := queueStats{Queue: args[0]}
		err := e.conn.QueryRow(ctx, `
			SELECT s.pending, s.ready, s.leased, s.backing_off, s.poisoned, s.oldest_pending_at,
			       extract(epoch FROM s.oldest_pending_age)::float8
			FROM outbox.stats($1) s`, args[0]).
			Scan(&s.Pending, &s.Ready, &s.Leased, &s.BackingOff, &s.Poisoned, &s.OldestPendingAt,
				&s.OldestPendingAgeSeconds)
		if err != nil {
			return fmt.Errorf("reading stats: %w", err)
		}
		s.OldestPendingAt = utc(s.OldestPendingAt)
		// The counts stand whatever it says: a role that may not ask is told so on stderr.
		if progress, err := headsRebuild(ctx, e.conn, args[0]); err != nil {
			fmt.Fprintf(e.errOut, "note: %v\n", err)
		} else if progress != "" {
			s.HeadsRebuild = &progress
		}
		if e.json {
			return writeJSON(e.out, s)
		}
		age := "-"
		if s.OldestPendingAgeSeconds != nil {
			d := time.Duration(*s.OldestPendingAgeSeconds * float64(time.Second))
			age = humanDuration(&d)
		}
		rows := [][]string{
			{"queue", s.Queue},
			{"pending", strconv.FormatInt(s.Pending, 10)},
			{"ready", strconv.FormatInt(s.Ready, 10)},
			{"leased", strconv.FormatInt(s.Leased, 10)},
			{"backing_off", strconv.FormatInt(s.BackingOff, 10)},
			{"poisoned", strconv.FormatInt(s.Poisoned, 10)},
			{"oldest_pending_at", timeOrDash(s.OldestPendingAt)},
			{"oldest_pending_age", age},
		}
		if s.HeadsRebuild != nil {
			rows = append(rows, []string{"heads_rebuild", *s.HeadsRebuild + ": keys no part has reached wait for their part"})
		}
		return writeTable(e.out, []string{"FIELD", "VALUE"}, rows)
	}),
}
