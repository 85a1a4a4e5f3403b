package relay

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgdrain/pgdrain/drainer"
)

// Defaults and limits of a FanOut. A zero field takes its default.
const (
	// DefaultFanOutBatchSize is how many events one fan-out transaction copies at most.
	DefaultFanOutBatchSize = 500
	// DefaultFanOutTimeout bounds each round of a fan-out transaction (claim, copy, record).
	DefaultFanOutTimeout = 10 * time.Second
	// FanOutSeparator joins a queue's table name and a sink's name into the table of the queue
	// that feeds that sink: public.orders and kafka make public.orders__kafka (FanOutQueue).
	FanOutSeparator = "__"
)

// fanOutSinkPattern is what a fan-out sink's name may be: lower case letters and digits, single
// underscores between them, so that the separator "__" never occurs inside it and a table name
// says unambiguously which queue it is a sink of.
var fanOutSinkPattern = regexp.MustCompile(`^[a-z][a-z0-9]*(_[a-z0-9]+)*$`)

// FanOut feeds one queue to several sinks, each at its own pace. The relay drains the queue in
// lock mode and, in each claim transaction, copies every claimed event (its type, payload,
// partition key, event_id, headers and created_at) into every queue named FanOutQueue(Queue,
// sink) that is registered, then records the events as sent: the copy and the record commit
// together, so each event reaches each of those queues exactly once. Each sink then drains its
// own queue with an ordinary Route, with its own pace, order per key, fencing, backoff and poison:
// a failing sink holds back only its own queue.
//
// The sinks' queues are found in the database at every transaction (its catalog, under a shared
// advisory lock that pgdrain fanout add takes exclusively), not in this config: every replica
// copies into the same set whatever its file says, and a sink added later gets every event from
// the moment its queue exists (or, with pgdrain fanout add --from oldest, also the queue's retained
// sent events, copied first). A queue with no sink queue is not drained: its events wait.
//
// Producers write only the queue: a sink costs them nothing. The relay's role needs
// pgdrain_worker and pgdrain_producer (to INSERT into the sinks' queues). Nothing else may drain
// the queue: an event recorded as sent by anything but the fan-out reaches no sink.
type FanOut struct {
	// Queue is the queue whose events are copied ("schema.table"), registered with
	// outbox.create_queue. Required.
	Queue string
	// BatchSize is how many events one fan-out transaction copies at most. A claim returns one
	// event per partition key, so a transaction claims again, in the same transaction, until it
	// has BatchSize events, a claim finds none or it is 100ms old (drainer.TxApplierRounds).
	// Defaults to 500 (DefaultFanOutBatchSize).
	BatchSize int
	// Timeout bounds each round of a transaction (claim, copy, record); a transaction ends one
	// second after its first round's Timeout at the latest. Defaults to 10s (DefaultFanOutTimeout).
	Timeout time.Duration
	// PollFallback is how often the queue is claimed without a NOTIFY. Defaults to the drainer's
	// (drainer.DefaultPollFallback).
	PollFallback time.Duration
	// RepairInterval is how often the drainer's repair pass runs on the queue (negative: off).
	// Defaults to the drainer's (drainer.DefaultRepairInterval).
	RepairInterval time.Duration
}

func (f FanOut) withDefaults() FanOut {
	f.BatchSize = cmp.Or(f.BatchSize, DefaultFanOutBatchSize)
	f.Timeout = cmp.Or(f.Timeout, DefaultFanOutTimeout)
	return f
}

// drainerConfig is the lock-mode drainer of the fan-out: a whole batch is applied at once.
func (f FanOut) drainerConfig() drainer.Config {
	f = f.withDefaults()
	return drainer.Config{
		Table:            f.Queue,
		ClaimMode:        drainer.ClaimLock,
		BatchSize:        f.BatchSize,
		ApplyConcurrency: f.BatchSize,
		ApplyTimeout:     f.Timeout,
		PollFallback:     f.PollFallback,
		RepairInterval:   f.RepairInterval,
	}
}

// Validate reports every problem of f (after defaults), one line each, each starting with the
// field name.
func (f FanOut) Validate() error {
	f = f.withDefaults()
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if f.Queue == "" {
		bad("Queue must be set to the queue table (\"schema.table\")")
	}
	if f.BatchSize < 1 || f.BatchSize > drainer.MaxBatchSize {
		bad("BatchSize must be between 1 and %d, got %d", drainer.MaxBatchSize, f.BatchSize)
	}
	if f.Timeout < 0 {
		bad("Timeout must be positive (or 0 for the default), got %s", f.Timeout)
	}
	if f.Queue != "" && len(errs) == 0 {
		for _, line := range splitLines(f.drainerConfig().Validate()) {
			field, msg, _ := strings.Cut(line, " ")
			switch field {
			case "Table":
				field = "Queue"
			case "ApplyTimeout":
				field = "Timeout"
			}
			bad("%s %s", field, msg)
		}
	}
	return errors.Join(errs...)
}

// FanOutQueue is the queue that feeds sink of queue (FanOutSeparator between the table names, in
// queue's schema): FanOutQueue("public.orders", "kafka") is "public.orders__kafka".
func FanOutQueue(queue, sink string) string {
	q := canonicalQueue(queue)
	return q + FanOutSeparator + sink
}

// CheckFanOutSink says why sink cannot be the name of a sink of queue ("" when it can): it must
// be lower case letters and digits with single underscores between them, and the table name it
// makes must fit PostgreSQL's 63 bytes.
func CheckFanOutSink(queue, sink string) string {
	if !fanOutSinkPattern.MatchString(sink) {
		return fmt.Sprintf("must be lower case letters and digits, with single underscores between them (%s separates it from the queue's name), got %q",
			FanOutSeparator, sink)
	}
	_, table, _ := strings.Cut(FanOutQueue(queue, sink), ".")
	if len(table) > 63 {
		return fmt.Sprintf("is too long: the table of its queue, %s, would be longer than PostgreSQL's 63 bytes", table)
	}
	return ""
}

// FanOutLockKey is the advisory lock of queue's fan-out, as SQL: every fan-out transaction holds
// it shared, from before it reads the set of sink queues until it commits, and whoever changes
// that set together with the sink queues' rows (pgdrain fanout add --from oldest) holds it
// exclusively, so no fan-out transaction copies with a set that is out of date.
func FanOutLockKey(queue string) string {
	return fmt.Sprintf("pg_catalog.hashtextextended(%s, 0)", quoteLiteral(fanOutLockName(queue)))
}

func fanOutLockName(queue string) string { return "pgdrain fan-out " + canonicalQueue(queue) }

func quoteLiteral(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }

// The fan-out's statements. The relay's role reads pg_class (every role may) and calls
// outbox.queue_info; it writes only rows of the sinks' queues (pgdrain_producer's column grants).
const (
	sqlFanOutLock = `SELECT pg_catalog.pg_advisory_xact_lock_shared(pg_catalog.hashtextextended($1, 0))`
	// sqlFanOutTables lists the tables of queue's schema whose names start with the queue's table
	// name and the separator (a range scan of pg_class's name index); fanOutTargets keeps those
	// whose remainder is a sink name. It runs as its own statement after the lock, so that its
	// snapshot sees whatever the lock's holder committed.
	sqlFanOutTables = `
		SELECT c.oid::int8, c.relname::text
		FROM pg_catalog.pg_class c
		WHERE c.relnamespace = (SELECT n.oid FROM pg_catalog.pg_namespace n WHERE n.nspname = $1)
		  AND c.relname >= $2::name AND c.relname < $3::name AND c.relkind IN ('r', 'p')`
	sqlFanOutSetLockTimeout = `SELECT pg_catalog.set_config('lock_timeout', $1, true)`
	sqlFanOutQueueInfo      = `SELECT queue_name, coalesce(partition_column, '') FROM outbox.queue_info($1)`
	sqlFanOutKeyType        = `
		SELECT pg_catalog.format_type(a.atttypid, a.atttypmod)
		FROM pg_catalog.pg_attribute a
		WHERE a.attrelid = $1::oid AND a.attname = $2 AND NOT a.attisdropped`
	// sqlFanOutInsert copies a batch (arrays in claim order) into one sink's queue: %s the table,
	// %s the partition column (", col") and %s its value (", u.k::type"), empty when unpartitioned.
	sqlFanOutInsert = `
		INSERT INTO %s (event_type, payload, event_id, headers, created_at%s)
		SELECT u.t, u.p, u.e, u.h, u.c%s
		FROM ROWS FROM (pg_catalog.unnest($1::text[]), pg_catalog.unnest($2::jsonb[]), pg_catalog.unnest($3::uuid[]),
		                pg_catalog.unnest($4::jsonb[]), pg_catalog.unnest($5::timestamptz[]), pg_catalog.unnest($6::text[]))
		     WITH ORDINALITY AS u(t, p, e, h, c, k, n)
		ORDER BY u.n`
)

// fanOut is a FanOut at run time: its drainer's TxApplier.
type fanOut struct {
	FanOut
	pool   *pgxpool.Pool
	logger interface {
		InfoContext(ctx context.Context, msg string, args ...any)
	}
	schema, table string // of the queue
	lo, hi        string // the range of table names that may be sinks' queues

	mu          sync.Mutex
	partitioned *bool             // the queue's, once read
	targets     map[int64]*target // by table oid, those resolved
	last        []string          // the sinks' queues of the last batch, for the log
	tx          pgx.Tx            // the transaction txTargets were read in
	txTargets   []*target
}

// target is one sink's queue.
type target struct {
	queue  string
	insert string
}

func newFanOut(f FanOut, pool *pgxpool.Pool, logger interface {
	InfoContext(ctx context.Context, msg string, args ...any)
}) *fanOut {
	schema, table, _ := strings.Cut(canonicalQueue(f.Queue), ".")
	prefix := table + FanOutSeparator
	return &fanOut{FanOut: f.withDefaults(), pool: pool, logger: logger, schema: schema, table: table,
		lo: prefix, hi: prefix[:len(prefix)-1] + string(rune(FanOutSeparator[len(FanOutSeparator)-1]+1)),
		targets: map[int64]*target{}}
}

// apply is the fan-out drainer's TxApplier: batch copied into every sink's queue, in tx.
func (f *fanOut) apply(ctx context.Context, tx pgx.Tx, batch []drainer.TxEvent) error {
	// The set read in this transaction holds until it ends: the lock taken with it stays, and
	// whoever changes the set waits for it (its later rounds, for a busy key, skip the read).
	// A call that fails is rolled back to its savepoint (drainer.TxApplier), which also releases
	// a lock it took: the next call reads the set again. (Deferred: a panic counts too.)
	ok := false
	defer func() {
		if !ok {
			f.mu.Lock()
			f.tx, f.txTargets = nil, nil
			f.mu.Unlock()
		}
	}()
	restore, err := boundLockWaits(ctx, tx)
	if err != nil {
		return err
	}
	f.mu.Lock()
	targets := f.txTargets
	if f.tx != tx {
		targets = nil
	}
	f.mu.Unlock()
	if targets == nil {
		var err error
		if targets, err = f.currentTargets(ctx, tx); err != nil {
			return err
		}
		f.mu.Lock()
		f.tx, f.txTargets = tx, targets
		f.mu.Unlock()
	}
	args := fanOutArgs(batch)
	var b pgx.Batch
	for _, t := range targets {
		b.Queue(t.insert, args...)
	}
	if restore != nil {
		b.Queue(sqlFanOutSetLockTimeout, *restore)
	}
	res := tx.SendBatch(ctx, &b)
	for _, t := range targets {
		tag, err := res.Exec()
		if err != nil {
			_ = res.Close()
			return fmt.Errorf("copying %d events into %s: %w%s", len(batch), t.queue, err, privilegeHint(err))
		}
		if tag.RowsAffected() != int64(len(batch)) {
			_ = res.Close()
			return fmt.Errorf("copying %d events into %s: %d rows written", len(batch), t.queue, tag.RowsAffected())
		}
	}
	if restore != nil {
		if _, err := res.Exec(); err != nil {
			_ = res.Close()
			return fmt.Errorf("restoring lock_timeout: %w", err)
		}
	}
	if err := res.Close(); err != nil {
		return err
	}
	ok = true
	return nil
}

// boundLockWaits sets lock_timeout, for the rest of the call (SET LOCAL, in the TxApplier's
// savepoint), a little before ctx's deadline, and returns the value to restore once the call
// succeeded (nil when ctx has none). A wait for a lock (pgdrain fanout add holding the fan-out's
// lock while it copies a long-retained queue, a DBA's ALTER TABLE of a sink's queue) then ends as
// lock_not_available, a systemic error: the transaction is rolled back and its rows claimed again,
// no attempt counted. Ended by ctx instead, the call ran out of its time, which the drainer charges
// to the rows (and an unpartitioned queue poisons them after max_attempts: they reach no sink).
func boundLockWaits(ctx context.Context, tx pgx.Tx) (*string, error) {
	deadline, ok := ctx.Deadline()
	if !ok {
		return nil, nil
	}
	wait := time.Until(deadline)
	wait -= max(wait/5, 100*time.Millisecond) // its answer must come back before the deadline, on a loaded machine too
	var b pgx.Batch
	b.Queue(`SELECT pg_catalog.current_setting('lock_timeout')`)
	b.Queue(sqlFanOutSetLockTimeout, fmt.Sprintf("%dms", max(wait.Milliseconds(), 1)))
	res := tx.SendBatch(ctx, &b)
	var prev string
	err := res.QueryRow().Scan(&prev)
	if err == nil {
		_, err = res.Exec()
	}
	if cerr := res.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return nil, fmt.Errorf("bounding the fan-out's lock waits: %w", err)
	}
	return &prev, nil
}

func privilegeHint(err error) string {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "42501" {
		return " (the relay's role needs pgdrain_producer to write the sinks' queues: GRANT pgdrain_producer TO <role>)"
	}
	return ""
}

// fanOutArgs are the arrays of sqlFanOutInsert.
func fanOutArgs(batch []drainer.TxEvent) []any {
	n := len(batch)
	types, payloads, ids, keys := make([]string, n), make([]string, n), make([]string, n), make([]string, n)
	headers := make([]*string, n)
	created := make([]time.Time, n)
	for i, e := range batch {
		types[i], payloads[i], ids[i], keys[i], created[i] = e.Type, string(e.Payload), e.EventID, e.PartitionKey, e.CreatedAt
		if len(e.Headers) > 0 {
			b, _ := json.Marshal(e.Headers) // a map of strings always marshals
			s := string(b)
			headers[i] = &s
		}
	}
	return []any{types, payloads, ids, headers, created, keys}
}

// currentTargets takes the fan-out's lock shared in tx, then reads the sinks' queues as they are
// now. A queue found for the first time is resolved (its registration and partition column) on
// another connection.
func (f *fanOut) currentTargets(ctx context.Context, tx pgx.Tx) ([]*target, error) {
	var b pgx.Batch
	b.Queue(sqlFanOutLock, fanOutLockName(f.Queue))
	b.Queue(sqlFanOutTables, f.schema, f.lo, f.hi)
	res := tx.SendBatch(ctx, &b)
	if _, err := res.Exec(); err != nil {
		_ = res.Close()
		return nil, fmt.Errorf("taking the fan-out's lock: %w", err)
	}
	rows, err := res.Query()
	if err != nil {
		_ = res.Close()
		return nil, fmt.Errorf("listing the sinks' queues: %w", err)
	}
	type table struct {
		oid  int64
		name string
	}
	var found []table
	var t table
	_, err = pgx.ForEachRow(rows, []any{&t.oid, &t.name}, func() error {
		if fanOutSinkPattern.MatchString(strings.TrimPrefix(t.name, f.lo)) {
			found = append(found, t)
		}
		return nil
	})
	if cerr := res.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return nil, fmt.Errorf("listing the sinks' queues: %w", err)
	}
	if len(found) == 0 {
		return nil, fmt.Errorf("queue %s.%s has no sink queue (a queue %s.%s%s<sink>): its events wait; create one with pgdrain fanout add",
			f.schema, f.table, f.schema, f.table, FanOutSeparator)
	}
	out := make([]*target, 0, len(found))
	for _, t := range found {
		x, err := f.resolve(ctx, t.oid, f.schema+"."+t.name)
		if err != nil {
			return nil, err
		}
		out = append(out, x)
	}
	f.noteTargets(ctx, out)
	return out, nil
}

// noteTargets logs the set of sinks' queues when it changed.
func (f *fanOut) noteTargets(ctx context.Context, targets []*target) {
	names := make([]string, len(targets))
	for i, t := range targets {
		names[i] = t.queue
	}
	slices.Sort(names)
	f.mu.Lock()
	changed := !slices.Equal(names, f.last)
	f.last = names
	f.mu.Unlock()
	if changed {
		f.logger.InfoContext(ctx, "fanning out", "to", strings.Join(names, ", "))
	}
}

// resolve returns the sink's queue of table oid: its INSERT, built once. A table named like a
// sink's queue that is not a registered queue, or whose partitioning differs from the queue's, is
// an error: copying around it would leave a hole in that sink's events.
func (f *fanOut) resolve(ctx context.Context, oid int64, name string) (*target, error) {
	f.mu.Lock()
	x := f.targets[oid]
	f.mu.Unlock()
	if x != nil {
		return x, nil
	}
	partitioned, err := f.queuePartitioned(ctx)
	if err != nil {
		return nil, err
	}
	var queue, column string
	if err := f.pool.QueryRow(ctx, sqlFanOutQueueInfo, name).Scan(&queue, &column); err != nil {
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && pgErr.Code == "42P01" {
			return nil, fmt.Errorf("table %s is named as a sink's queue of %s but is not a registered queue: register it "+
				"(outbox.create_queue, or pgdrain fanout add) or rename it; until then the fan-out waits, so that no sink misses an event",
				name, canonicalQueue(f.Queue))
		}
		return nil, fmt.Errorf("reading the registration of %s: %w", name, err)
	}
	if (column != "") != partitioned {
		return nil, fmt.Errorf("sink queue %s is %s but %s is %s: a sink's queue must be partitioned like its queue "+
			"(recreate it with pgdrain fanout add)", queue, partitionedWord(column != ""), canonicalQueue(f.Queue), partitionedWord(partitioned))
	}
	keyColumn, keyValue := "", ""
	if column != "" {
		var typ string
		if err := f.pool.QueryRow(ctx, sqlFanOutKeyType, oid, column).Scan(&typ); err != nil {
			return nil, fmt.Errorf("reading the type of %s.%s: %w", queue, column, err)
		}
		keyColumn, keyValue = ", "+pgx.Identifier{column}.Sanitize(), ", u.k::"+typ
	}
	schema, table, _ := strings.Cut(queue, ".")
	x = &target{queue: queue,
		insert: fmt.Sprintf(sqlFanOutInsert, pgx.Identifier{schema, table}.Sanitize(), keyColumn, keyValue)}
	f.mu.Lock()
	f.targets[oid] = x
	f.mu.Unlock()
	return x, nil
}

func partitionedWord(p bool) string {
	if p {
		return "partitioned"
	}
	return "not partitioned"
}

// queuePartitioned reads (once) whether the fanned-out queue has a partition column.
func (f *fanOut) queuePartitioned(ctx context.Context) (bool, error) {
	f.mu.Lock()
	p := f.partitioned
	f.mu.Unlock()
	if p != nil {
		return *p, nil
	}
	var queue, column string
	if err := f.pool.QueryRow(ctx, sqlFanOutQueueInfo, f.Queue).Scan(&queue, &column); err != nil {
		return false, fmt.Errorf("reading the registration of %s: %w", f.Queue, err)
	}
	partitioned := column != ""
	f.mu.Lock()
	f.partitioned = &partitioned
	f.mu.Unlock()
	return partitioned, nil
}
