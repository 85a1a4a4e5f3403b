// Package pgerr classifies database errors for the drainer and the escalation engine, so both
// treat a restart, a failover or a dead connection the same way: wait and retry with backoff,
// logging the cause at Warn, while a misconfiguration (authentication, permissions, a missing
// object) still fails at once.
package pgerr

import (
	"cmp"
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Backoff bounds: the pause after a call failed because the database is unavailable starts at
// BackoffMin and doubles up to BackoffMax (Next).
const (
	BackoffMin = 100 * time.Millisecond
	BackoffMax = 5 * time.Second
)

// Next returns the pause after d: twice d, at most BackoffMax.
func Next(d time.Duration) time.Duration {
	return min(2*max(d, BackoffMin/2), BackoffMax)
}

// Unavailable says why err means "no writable database right now" (a restart, a failover or
// switchover, a DSN that reaches a standby, a connection that stopped answering within its call's
// bound), or returns "" for any other error. Those errors pass: callers retry them with backoff,
// also at start, and log them at Warn with this cause. Authentication, permission and
// missing-object errors are not among them, so a misconfiguration still fails at once. A
// cancelled context is not either; a deadline that expired is (callers check their own ctx first:
// a call's bound ran out, the server did not answer in time).
func Unavailable(err error) string {
	if err == nil {
		return ""
	}
	// A *pgconn.PgError is the server's word; check it first (a ConnectError may wrap one, such as
	// 28P01 for a bad password, which is not a failover).
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		switch {
		case pgErr.Code == "57P01":
			return "the server is shutting down (administrator command: a fast shutdown, a switchover, or pg_terminate_backend)"
		case pgErr.Code == "57P05":
			// The server ended the session while it sat idle in the pool (the role's or database's
			// idle_session_timeout, shorter than the pool's ping-on-acquire idle time): the statement
			// never ran, and another connection can run it.
			return "the server ended the connection after it sat idle (idle_session_timeout)"
		case pgErr.Code == "57P02":
			return "the server crashed (crash shutdown)"
		case pgErr.Code == "53300":
			return "the server refuses more connections (max_connections, or the role's or the database's connection limit, is reached)"
		case pgErr.Code == "57P03":
			return "the server does not accept connections now (starting up, shutting down, or in recovery)"
		case (pgErr.Code == "25006" || pgErr.Code == "0A000") && strings.Contains(pgErr.Message, "during recovery"):
			// Only a server in recovery says "during recovery": 0A000 for the unlogged partition
			// heads, which a standby cannot read, 25006 for LISTEN.
			return standbyCause
		case pgErr.Code == "25006":
			return ReadOnlyCause
		case strings.HasPrefix(pgErr.Code, "08"):
			return "the connection failed"
		}
		return ""
	}
	if errors.Is(err, context.Canceled) {
		return ""
	}
	if pgconn.Timeout(err) || errors.Is(err, context.DeadlineExceeded) {
		// The call's own bound ran out: the connection (or the dial) got no answer, as from a host
		// that vanished without a reset. pgx closed the connection; the pool dials again.
		return "the server did not answer within the call's bound (a dead connection or an unreachable host; abandoned)"
	}
	var connectErr *pgconn.ConnectError
	if errors.As(err, &connectErr) {
		return "no server accepted the connection (none reachable, or none writable under target_session_attrs)"
	}
	var netErr net.Error
	// pgconn.ErrConnClosed: the socket went away under a statement (a COMMIT on a connection
	// the server just closed, for one), which pgx does not mark safe to retry.
	if errors.As(err, &netErr) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, pgconn.ErrConnClosed) || pgconn.SafeToRetry(err) {
		return "the connection was lost"
	}
	return ""
}

// standbyCause is Unavailable's cause for an error only a server in recovery raises.
const standbyCause = "the server is a read-only standby: pgdrain needs the primary " +
	"(retrying until this server is promoted; a DSN naming every host with target_session_attrs=read-write finds the primary)"

// ReadOnlyCause is Unavailable's cause for SQLSTATE 25006 ("cannot execute UPDATE in a read-only
// transaction"). A standby raises it, and so does a primary whose default_transaction_read_only is
// on for the role or the database (a DBA's step during maintenance, or a mistaken setting): the
// error alone does not tell them apart, so it names both and how to check (WhyReadOnly asks).
const ReadOnlyCause = "the server refuses writes (a read-only transaction): either a standby " +
	"(SELECT pg_is_in_recovery() says true: pgdrain needs the primary, which a DSN naming every host with " +
	"target_session_attrs=read-write finds) or a primary with default_transaction_read_only = on for this role or database " +
	"(SHOW default_transaction_read_only; lift it with ALTER ROLE or ALTER DATABASE ... RESET default_transaction_read_only); " +
	"retrying until it accepts writes"

// Code is err's SQLSTATE when the server sent it, else "".
func Code(err error) string {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return pgErr.Code
	}
	return ""
}

// ReadOnly reports whether err is the server refusing a write because the transaction is read only
// (SQLSTATE 25006): a standby, or a session whose default_transaction_read_only is on.
func ReadOnly(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "25006"
}

// Querier is what WhyReadOnly asks: a pool, a connection or a transaction.
type Querier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// WhyReadOnly asks the server, through q, why it refuses writes (ReadOnly errors), and says what
// is true and what to do: a standby (pg_is_in_recovery()), or default_transaction_read_only = on
// and where it was set (the role, the database, the connection, the server's configuration:
// pg_settings.source). It answers for the session q reaches, so ask through the session that was
// refused, or a new one: a session keeps the default it began with. When the question itself
// fails it returns ReadOnlyCause.
func WhyReadOnly(ctx context.Context, q Querier) string {
	var (
		recovery, readOnly   bool
		source, role, dbname string
	)
	err := q.QueryRow(ctx, `SELECT pg_catalog.pg_is_in_recovery(),
		pg_catalog.current_setting('default_transaction_read_only')::boolean,
		coalesce((SELECT s.source FROM pg_catalog.pg_settings s WHERE s.name = 'default_transaction_read_only'), ''),
		current_user::text, pg_catalog.current_database()::text`).Scan(&recovery, &readOnly, &source, &role, &dbname)
	switch {
	case err != nil:
		return ReadOnlyCause
	case recovery:
		return standbyCause
	case !readOnly:
		return "the server is a primary (pg_is_in_recovery() is false) and a session begun now may write " +
			"(default_transaction_read_only is off): writes were refused in a session begun while the setting was on, " +
			"or in a transaction begun READ ONLY; retrying"
	}
	role, dbname = pgx.Identifier{role}.Sanitize(), pgx.Identifier{dbname}.Sanitize()
	where := "(pg_settings.source: " + source + ")"
	switch source {
	case "database":
		where = "for database " + dbname + " (lift it with ALTER DATABASE " + dbname + " RESET default_transaction_read_only)"
	case "user":
		where = "for role " + role + " (lift it with ALTER ROLE " + role + " RESET default_transaction_read_only)"
	case "database user":
		where = "for role " + role + " in database " + dbname + " (lift it with ALTER ROLE " + role + " IN DATABASE " + dbname +
			" RESET default_transaction_read_only)"
	case "client":
		where = "by the connection (the DSN's options or PGOPTIONS: -c default_transaction_read_only=on)"
	case "configuration file":
		where = "in the server's configuration (postgresql.conf or ALTER SYSTEM; reload after lifting it)"
	case "session":
		where = "in the session (SET default_transaction_read_only)"
	}
	return "the server is a primary (pg_is_in_recovery() is false) that refuses writes: default_transaction_read_only = on, set " +
		where + "; sessions begun after it is lifted can write"
}

// Conflict says why err is the server aborting a call on a passing conflict with other
// transactions, which the same call, made again, gets past: a deadlock (40P01), a serialization
// failure (40001), or PostgreSQL's "new multixact has more than one updating member" (XX000), an
// internal error it raises when a row held FOR KEY SHARE (producers hold partition heads so) is
// updated at the moment another updater of it is aborting; the row is not changed. "" for any
// other error.
func Conflict(err error) string {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) {
		return ""
	}
	switch {
	case pgErr.Code == "40P01":
		return "a deadlock with another transaction (aborted by the server)"
	case pgErr.Code == "40001":
		return "a serialization failure (a concurrent update)"
	case pgErr.Code == "XX000" && strings.HasPrefix(pgErr.Message, "new multixact has more than one updating member"):
		return "a PostgreSQL race on a row locked FOR KEY SHARE while another updater of it aborted (nothing changed)"
	}
	return ""
}

// Cancelled says why err is the server cancelling a call on its own timeouts or an operator's
// request, which the same call, made again, may get past: its lock_timeout ended a wait for a
// lock another transaction held (55P03), its statement_timeout ran out, or pg_cancel_backend
// (57014). "" for any other error. A caller that retries these must bound its retries: a timeout
// set too short for the call fails it every time.
func Cancelled(err error) string {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) {
		return ""
	}
	switch {
	case pgErr.Code == "55P03":
		return "the server's lock_timeout ended a wait for a lock another transaction held"
	case pgErr.Code == "57014" && strings.Contains(pgErr.Message, "statement timeout"):
		return "the server's statement_timeout cancelled the statement"
	case pgErr.Code == "57014":
		return "the server cancelled the statement (a cancel request, such as pg_cancel_backend)"
	}
	return ""
}

// Passing says why err is an error the same call, made again later, may get past: the database
// unavailable (Unavailable), a passing conflict with other transactions (Conflict), or the server
// cancelling the call on its own timeouts (Cancelled); "" for any other error. Callers that start
// up wait these out with backoff instead of failing: a DBA's VACUUM FULL of a registry under a
// role's lock_timeout, or a full max_connections, passes.
func Passing(err error) string {
	return cmp.Or(Unavailable(err), Conflict(err), Cancelled(err))
}
