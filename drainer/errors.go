package drainer

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/puddle/v2"
	"github.com/pgdrain/pgdrain/internal/pgerr"
	"github.com/pgdrain/pgdrain/internal/version"
)

// Class says whether a failed apply may succeed if tried again.
type Class int

const (
	// ClassTransient (the default for any error) retries the row with backoff. On a partitioned
	// queue a transient failure never poisons the row, so its partition waits for the peer.
	ClassTransient Class = iota
	// ClassPermanent records the row as failed for good (or retries it, under RetryPermanent).
	ClassPermanent
)

// String returns "transient" or "permanent".
func (c Class) String() string {
	switch c {
	case ClassTransient:
		return "transient"
	case ClassPermanent:
		return "permanent"
	}
	return fmt.Sprintf("Class(%d)", int(c))
}

// ClassifiedError carries the Class an Applier chose for its error. Find it with errors.As.
type ClassifiedError struct {
	Class Class
	Err   error
	// RetryAt, for a transient error, is the earliest time to try the row again (a peer's
	// Retry-After); zero means the queue's backoff. See RetryAt.
	RetryAt time.Time
}

// Error returns the wrapped error's text.
func (e *ClassifiedError) Error() string {
	if e.Err == nil {
		return e.Class.String() + " failure"
	}
	return e.Err.Error()
}

// Unwrap returns the wrapped error.
func (e *ClassifiedError) Unwrap() error { return e.Err }

// Permanent marks err as permanent: the event will never apply (a 4xx from a webhook, a payload
// the peer rejects). It returns nil for a nil err.
func Permanent(err error) error {
	if err == nil {
		return nil
	}
	return &ClassifiedError{Class: ClassPermanent, Err: err}
}

// Transient marks err as transient explicitly (the default for unmarked errors), for example to
// override a permanent error wrapped deeper inside. It returns nil for a nil err.
func Transient(err error) error {
	if err == nil {
		return nil
	}
	return &ClassifiedError{Class: ClassTransient, Err: err}
}

// RetryAt marks err as transient and asks that the row be tried again no earlier than at (a peer's
// Retry-After): the drainer records it with the result (outbox.apply_results' retry_at), fenced
// like every result, instead of the queue's exponential backoff. A time already past means as soon
// as possible. On a partitioned queue the row's key waits until then. It returns nil for a nil err.
func RetryAt(err error, at time.Time) error {
	if err == nil {
		return nil
	}
	return &ClassifiedError{Class: ClassTransient, Err: err, RetryAt: at}
}

// retryAtOf returns the time the outermost ClassifiedError of a transient err asks for, or zero.
func retryAtOf(err error) time.Time {
	var ce *ClassifiedError
	if errors.As(err, &ce) && ce.Class == ClassTransient {
		return ce.RetryAt
	}
	return time.Time{}
}

// ClassOf returns the Class of the outermost ClassifiedError in err's chain, or ClassTransient.
func ClassOf(err error) Class {
	var ce *ClassifiedError
	if errors.As(err, &ce) {
		return ce.Class
	}
	return ClassTransient
}

// Disposition is what the drainer records for an applied row: the outcome passed to
// outbox.apply_results or outbox.settle_locked.
type Disposition int

const (
	// DispositionSent: the Applier returned nil.
	DispositionSent Disposition = iota
	// DispositionTransient: the Applier failed with a transient error (or timed out).
	DispositionTransient
	// DispositionPermanent: the Applier failed permanently, panicked, or the payload did not decode.
	DispositionPermanent
)

// String returns the SQL outcome: "sent", "transient" or "permanent".
func (d Disposition) String() string {
	switch d {
	case DispositionSent:
		return "sent"
	case DispositionTransient:
		return "transient"
	case DispositionPermanent:
		return "permanent"
	}
	return fmt.Sprintf("Disposition(%d)", int(d))
}

// dispositionOf maps an apply error to what is recorded.
func dispositionOf(err error) Disposition {
	switch {
	case err == nil:
		return DispositionSent
	case ClassOf(err) == ClassPermanent:
		return DispositionPermanent
	default:
		return DispositionTransient
	}
}

// ErrAlreadyRunning is returned by Run when the Drainer is already running.
var ErrAlreadyRunning = errors.New("drainer is already running")

// ErrQueueNotRegistered is matched (errors.Is) by the error Run returns when the queue is not
// registered with outbox.create_queue, or its table was dropped outside outbox.drop_queue
// (SQLSTATE 42P01 from the outbox functions).
var ErrQueueNotRegistered = errors.New("queue is not registered")

// ErrSchemaTooOld is matched (errors.Is) by the error Run returns when the database's outbox schema
// is older than OutboxMigrationNeeded, or predates outbox.version(), or is not installed. The error
// says which migration the schema is at, which one the drainer needs, and how to migrate:
//
//	database has no schema outbox, this drainer needs 00025 or later: run goose-run up (cmd/goose-run), or apply the migrations/outbox/*.sql it lacks in order (docs/install.md)
//
// A schema migrated part way through the development history before 0.1.0, which the 0.1.0
// baseline refuses, is told to apply the rest of sql/history/outbox first
// (docs/install.md#databases-migrated-before-010).
var ErrSchemaTooOld = version.ErrSchemaTooOld

// OutboxMigrationNeeded is the oldest outbox migration this drainer works with (Run checks
// outbox.version() against it).
const OutboxMigrationNeeded = version.OutboxNeeded

// ErrRegistrationMismatch is matched (errors.Is) by the error Run returns when an Expect field of
// the Config disagrees with the queue's registration (outbox.queue_info). The error names every
// disagreeing field, one per line, each line starting with the field name.
var ErrRegistrationMismatch = errors.New("queue registration does not match the Config's expectations")

// ErrPoolClosed is matched (errors.Is) by the error Run returns when the pool given to New is
// closed (pool.Close) before Run starts or while it runs: nothing can reach the database through
// that pool again, so Run stops at the first call that meets it instead of retrying until its ctx
// ends. The error also matches the pool's own error (puddle.ErrClosedPool, "closed pool") and
// names the call that met it.
var ErrPoolClosed = errors.New("the drainer's pool is closed (pool.Close was called before Run returned)")

// poolClosed returns Run's error when err comes from a call on a closed pool (pgxpool returns
// puddle.ErrClosedPool, unwrapped, for every acquire after Close), else nil. A pool is closed for
// good, so this is never retried.
func poolClosed(err error) error {
	if !errors.Is(err, puddle.ErrClosedPool) {
		return nil
	}
	return fmt.Errorf("%w: %w", ErrPoolClosed, err)
}

// notRegisteredError keeps PostgreSQL's message (which names the queue and says what to do) and
// the *pgconn.PgError beneath it.
type notRegisteredError struct{ pgErr *pgconn.PgError }

func (e *notRegisteredError) Error() string {
	// The outbox functions prefix their own name ("queue_info: "); the rest is the sentence.
	_, rest, ok := strings.Cut(e.pgErr.Message, ": ")
	if ok && (strings.HasPrefix(rest, "queue ") || strings.HasPrefix(rest, "the table of queue ")) {
		return rest
	}
	return e.pgErr.Message
}

func (e *notRegisteredError) Unwrap() error { return e.pgErr }

func (e *notRegisteredError) Is(target error) bool { return target == ErrQueueNotRegistered }

// translate is the one place where a database error becomes the drainer's: an unregistered queue
// becomes ErrQueueNotRegistered; anything else is wrapped as "doing: err".
func translate(doing string, err error) error {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "42P01" && strings.Contains(pgErr.Message, "queue ") {
		return &notRegisteredError{pgErr: pgErr}
	}
	if lostStatement(pgErr) {
		return fmt.Errorf("%s: %w (the pool reaches PostgreSQL through a transaction pooler that keeps no prepared "+
			"statements, e.g. PgBouncer < 1.21 in pool_mode=transaction: set default_query_exec_mode=exec in the pool's "+
			"connection string; see docs/pgbouncer.md)", doing, err)
	}
	return fmt.Errorf("%s: %w", doing, err)
}

// unavailable says why err means "no writable database right now", or "" (internal/pgerr, shared
// with the escalation engine): those errors are retried with backoff, also at start, and logged at
// Warn with this cause; authentication, permission and registration errors are not among them, so
// Run still fails fast on a misconfiguration.
func unavailable(err error) string { return pgerr.Unavailable(err) }

// unavailable is unavailable(err), except that a refused write gets what the server said of itself
// at the start of the streak (Health.Cause) rather than "a standby or a read-only default".
func (d *Drainer[T]) unavailable(err error) string {
	if h := d.Health(); pgerr.ReadOnly(err) && pgerr.ReadOnly(h.Err) && h.Cause != "" {
		return h.Cause
	}
	return unavailable(err)
}

// dataException returns the server's error when err is a data exception (SQLSTATE class 22: a
// value the server refuses, such as a text it cannot store in its encoding or a time out of its
// range), or nil. A batch of results refused so is recorded row by row (recordEach).
func dataException(err error) *pgconn.PgError {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && strings.HasPrefix(pgErr.Code, "22") {
		return pgErr
	}
	return nil
}

// logRetry logs a failed database call that the drainer retries after retryIn: at Warn with its
// cause when the database is unavailable (see unavailable), the call met a passing conflict
// with other transactions (pgerr.Conflict) or the server cancelled it on its own timeouts
// (pgerr.Cancelled), otherwise at Error. A line that repeats is logged so the first three times,
// then once a minute with the retries since (quieted_retries), which are logged at Debug.
func (d *Drainer[T]) logRetry(ctx context.Context, msg string, err error, retryIn time.Duration) {
	level, attrs := slog.LevelError, []any{"err", err}
	if cause := d.unavailable(err); cause != "" {
		level, msg, attrs = slog.LevelWarn, msg+" (database unavailable)", append(attrs, "cause", cause)
	} else if cause := pgerr.Conflict(err); cause != "" {
		level, msg, attrs = slog.LevelWarn, msg+" (a passing conflict; retrying)", append(attrs, "cause", cause)
		d.recheckIsolation(ctx, err)
	} else if cause := pgerr.Cancelled(err); cause != "" {
		level, msg, attrs = slog.LevelWarn, msg+" (cancelled by the server; retrying)", append(attrs, "cause", cause)
	}
	attrs = append(attrs, "retry_in", retryIn)
	loud, quieted := d.retries.Admit(msg+" "+pgerr.Code(err), time.Now())
	if !loud {
		d.logger.Log(ctx, slog.LevelDebug, msg, attrs...)
		return
	}
	if quieted > 0 {
		attrs = append(attrs, "quieted_retries", quieted)
	}
	d.logger.Log(ctx, level, msg, attrs...)
}

// recheckIsolation switches the drainer's statements to READ COMMITTED transactions of their own
// after a serialization failure that says a connection began in another level (readcommitted.Recheck).
func (d *Drainer[T]) recheckIsolation(ctx context.Context, err error) {
	if d.db.Recheck(err) {
		d.logger.InfoContext(ctx, "a statement failed with a serialization failure: the pool's connections now begin in another "+
			"level than READ COMMITTED (default_transaction_isolation changed); the drainer runs each statement in a READ "+
			"COMMITTED transaction of its own from now on")
	}
}

// lostStatement tells whether pgErr is what pgx's prepared statements (default_query_exec_mode
// cache_statement or describe_exec) run into behind a transaction pooler: the statement was
// prepared on another server connection (26000), another client prepared the same cached name on
// this one (42P05), or the unnamed statement of the describe round trip was replaced (08P01).
func lostStatement(pgErr *pgconn.PgError) bool {
	if pgErr == nil {
		return false
	}
	switch pgErr.Code {
	case "26000", "42P05":
		return strings.Contains(pgErr.Message, "stmtcache_") || strings.Contains(pgErr.Message, "unnamed prepared statement")
	case "08P01":
		return strings.Contains(pgErr.Message, "bind message supplies")
	}
	return false
}
