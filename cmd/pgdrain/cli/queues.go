package cli

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
)

// queueInfo is one row of the registry outbox.queues.
type queueInfo struct {
	Queue             string    `json:"queue"`
	PartitionColumn   *string   `json:"partition_column"`
	MaxAttempts       int       `json:"max_attempts"`
	BackoffMinSeconds float64   `json:"backoff_min_seconds"`
	BackoffMaxSeconds float64   `json:"backoff_max_seconds"`
	PermanentPolicy   string    `json:"permanent_policy"`
	Channel           string    `json:"channel"`
	CreatedAt         time.Time `json:"created_at"`
}

var queuesCommand = command{
	name: "queues", minArgs: 0, maxArgs: 0,
	bind: noFlags(func(ctx context.Context, e env, _ []string) error {
		rows, err := e.conn.Query(ctx, `
			SELECT q.queue, q.partition_column, q.max_attempts,
			       extract(epoch FROM q.backoff_min)::float8, extract(epoch FROM q.backoff_max)::float8,
			       q.permanent_policy, q.channel, q.created_at
			FROM outbox.queues q ORDER BY q.queue`)
		if err != nil {
			return fmt.Errorf("reading outbox.queues: %w", err)
		}
		list, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (queueInfo, error) {
			var q queueInfo
			err := r.Scan(&q.Queue, &q.PartitionColumn, &q.MaxAttempts, &q.BackoffMinSeconds,
				&q.BackoffMaxSeconds, &q.PermanentPolicy, &q.Channel, &q.CreatedAt)
			q.CreatedAt = q.CreatedAt.UTC()
			return q, err
		})
		if err != nil {
			return fmt.Errorf("reading outbox.queues: %w", err)
		}
		if e.json {
			if list == nil {
				list = []queueInfo{}
			}
			return writeJSON(e.out, list)
		}
		table := make([][]string, len(list))
		for i, q := range list {
			table[i] = []string{q.Queue, orDash(q.PartitionColumn), strconv.Itoa(q.MaxAttempts),
				secondsText(q.BackoffMinSeconds) + ".." + secondsText(q.BackoffMaxSeconds),
				q.PermanentPolicy, q.Channel}
		}
		return writeTable(e.out, []string{"QUEUE", "PARTITION", "MAX_ATTEMPTS", "BACKOFF", "PERMANENT", "CHANNEL"}, table)
	}),
}

func secondsText(s float64) string {
	return ageText(time.Duration(s * float64(time.Second)))
}
