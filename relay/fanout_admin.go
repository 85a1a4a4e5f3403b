package relay

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// FanOutStart is where a sink added to a fanned-out queue starts.
type FanOutStart int

const (
	// FromNow: the sink gets every event the fan-out copies once its queue exists.
	FromNow FanOutStart = iota
	// FromOldest: the sink also gets every event the queue still retains as sent (until
	// outbox.purge_sent deletes them), copied first in each key's order.
	FromOldest
)

// String returns "now" or "oldest".
func (s FanOutStart) String() string {
	switch s {
	case FromNow:
		return "now"
	case FromOldest:
		return "oldest"
	}
	return fmt.Sprintf("FanOutStart(%d)", int(s))
}

// Beginner starts a transaction: a *pgx.Conn or a *pgxpool.Pool.
type Beginner interface {
	Begin(ctx context.Context) (pgx.Tx, error)
}

// AddFanOutSink creates the queue of sink (FanOutQueue(queue, sink)) with queue's registration
// (partition column, max attempts, backoff, permanent policy; outbox.create_queue, which grants
// pgdrain_producer the INSERT the relay needs) and, with FromOldest, copies into it every event
// queue retains as sent, in id order (each key's commit order), with its event_id. It returns how
// many events it copied.
//
// All of it is one transaction that holds the fan-out's lock (FanOutLockKey) exclusively: it
// waits for the fan-out transactions in flight, and those after it see the new queue, so the sink
// misses no event and gets each key's events in order. Fan-out waits meanwhile; producers and the
// other sinks do not. It runs as the queue's owner (it creates a table and reads the queue's rows).
// A sink whose queue exists already is an error: drop it first (outbox.drop_queue(q, drop_table
// => true)) to start it again.
func AddFanOutSink(ctx context.Context, db Beginner, queue, sink string, start FanOutStart) (int64, error) {
	if problem := CheckFanOutSink(queue, sink); problem != "" {
		return 0, fmt.Errorf("sink %s", problem)
	}
	if start != FromNow && start != FromOldest {
		return 0, fmt.Errorf("start must be FromNow or FromOldest, got %d", int(start))
	}
	target := FanOutQueue(queue, sink)
	tx, err := db.Begin(ctx)
	if err != nil {
		return 0, fmt.Errorf("adding sink %s: %w", sink, err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	// READ COMMITTED whatever the database's default: under REPEATABLE READ or SERIALIZABLE the
	// snapshot was taken by the lock's statement, before its wait, and the copy below missed the
	// events that the fan-out transactions it waited for committed as sent meanwhile (they did not
	// know the new queue either): the sink never got them.
	if _, err := tx.Exec(ctx, `SET TRANSACTION ISOLATION LEVEL READ COMMITTED`); err != nil {
		return 0, fmt.Errorf("adding sink %s: %w", sink, err)
	}
	if _, err := tx.Exec(ctx, `SELECT pg_catalog.pg_advisory_xact_lock(pg_catalog.hashtextextended($1, 0))`, fanOutLockName(queue)); err != nil {
		return 0, fmt.Errorf("taking the fan-out's lock of %s: %w", queue, err)
	}
	var (
		name, column, policy   string
		maxAttempts            int
		backoffMin, backoffMax int64 // microseconds
	)
	// The backoffs come back as integer microseconds: a connection that reads results as text
	// (default_query_exec_mode exec or simple_protocol, behind PgBouncer: docs/pgbouncer.md) gets
	// an interval in the session's IntervalStyle, which pgx parses only in the postgres style.
	// Under a role's IntervalStyle postgres_verbose or iso_8601 (sql_standard: from a day on),
	// adding a sink failed here, before creating its queue.
	err = tx.QueryRow(ctx, `SELECT queue_name, coalesce(partition_column, ''), max_attempts,
		       (extract(epoch FROM backoff_min) * 1000000)::int8, (extract(epoch FROM backoff_max) * 1000000)::int8,
		       permanent_policy
		FROM outbox.queue_info($1)`, queue).Scan(&name, &column, &maxAttempts, &backoffMin, &backoffMax, &policy)
	if err != nil {
		return 0, fmt.Errorf("reading the registration of %s: %w", queue, err)
	}
	var exists bool
	if err := tx.QueryRow(ctx, `SELECT pg_catalog.to_regclass($1) IS NOT NULL`, target).Scan(&exists); err != nil {
		return 0, fmt.Errorf("looking for %s: %w", target, err)
	}
	if exists {
		return 0, fmt.Errorf("the queue of sink %s, %s, exists already: it is fed from the moment it was made; "+
			"to start it again, drop it first (SELECT outbox.drop_queue('%s', drop_table => true))", sink, target, target)
	}
	var partition *string
	if column != "" {
		partition = &column
	}
	if _, err := tx.Exec(ctx, `SELECT outbox.create_queue($1, $2, $3, $4, $5, $6)`,
		target, partition, maxAttempts, time.Duration(backoffMin)*time.Microsecond, time.Duration(backoffMax)*time.Microsecond,
		policy); err != nil {
		return 0, fmt.Errorf("creating %s: %w", target, err)
	}
	var copied int64
	if start == FromOldest {
		schema, table, _ := strings.Cut(name, ".")
		tschema, ttable, _ := strings.Cut(target, ".")
		keyColumn, keyValue := "", ""
		if column != "" {
			keyColumn = ", " + pgx.Identifier{column}.Sanitize()
			keyValue = ", t." + pgx.Identifier{column}.Sanitize() + "::text"
		}
		// The event_id of a row written before its table had one is the one the claims hand out
		// (a uuid derived from the queue and the id: outbox._event_id_of).
		tag, err := tx.Exec(ctx, fmt.Sprintf(`
			INSERT INTO %s (event_type, payload, event_id, headers, created_at%s)
			SELECT t.event_type, t.payload, COALESCE(t.event_id, pg_catalog.md5(%s || t.id::text)::uuid), t.headers, t.created_at%s
			FROM %s t WHERE t.sent_at IS NOT NULL ORDER BY t.id`,
			pgx.Identifier{tschema, ttable}.Sanitize(), keyColumn, quoteLiteral(name+"/"), keyValue,
			pgx.Identifier{schema, table}.Sanitize()))
		if err != nil {
			return 0, fmt.Errorf("copying the retained events of %s into %s: %w", name, target, err)
		}
		copied = tag.RowsAffected()
	}
	if err := tx.Commit(ctx); err != nil {
		return 0, fmt.Errorf("committing sink %s: %w", sink, err)
	}
	return copied, nil
}
