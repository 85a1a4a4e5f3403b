package pgerr

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
)

// TestUnavailable pins which errors mean "no writable database right now" (retried with backoff,
// at start too) and which do not (returned at start, logged at Error while draining).
func TestUnavailable(t *testing.T) {
	t.Parallel()
	// A real ConnectError: nothing listens on a port of 127.0.0.1 that was just closed.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	_ = ln.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, refused := pgconn.Connect(ctx, fmt.Sprintf("host=127.0.0.1 port=%d user=x dbname=x sslmode=disable connect_timeout=2", port))
	if refused == nil {
		t.Fatal("connecting to a closed port succeeded")
	}

	pg := func(code, msg string) error {
		return fmt.Errorf("claiming batch: %w", &pgconn.PgError{Code: code, Message: msg})
	}
	cases := []struct {
		name string
		err  error
		want bool
	}{
		{"admin shutdown 57P01", pg("57P01", "terminating connection due to administrator command"), true},
		{"crash shutdown 57P02", pg("57P02", "terminating connection because of crash of another server process"), true},
		{"cannot connect now 57P03", pg("57P03", "the database system is shutting down"), true},
		{"idle session timeout 57P05", pg("57P05", "terminating connection due to idle-session timeout"), true},
		{"read-only 25006", pg("25006", "cannot execute LISTEN during recovery"), true},
		{"unlogged table on a standby 0A000", pg("0A000", "cannot access temporary or unlogged relations during recovery"), true},
		{"connection failure 08006", pg("08006", "connection failure"), true},
		{"connection refused", refused, true},
		{"unexpected EOF", fmt.Errorf("recording: %w", io.ErrUnexpectedEOF), true},
		{"conn closed under a COMMIT", fmt.Errorf("committing batch: %w", pgconn.ErrConnClosed), true},
		{"other 0A000", pg("0A000", "cannot use this feature"), false},
		{"bad password 28P01", pg("28P01", "password authentication failed for user x"), false},
		{"permission denied 42501", pg("42501", "permission denied for function claim_batch"), false},
		{"queue not registered 42P01", pg("42P01", "queue_info: queue public.x is not registered"), false},
		{"a closed pool", errors.New("closed pool"), false},
		{"cancelled", context.Canceled, false},
		{"a call's bound ran out", fmt.Errorf("claiming batch: %w", context.DeadlineExceeded), true},
		{"nil", nil, false},
	}
	for _, c := range cases {
		if got := Unavailable(c.err) != ""; got != c.want {
			t.Errorf("%s: Unavailable = %v (%q), want %v", c.name, got, Unavailable(c.err), c.want)
		}
	}
}

// TestConflict pins which server errors are a passing conflict with other transactions (a result
// flush is retried while its leases last): a deadlock, a serialization failure and PostgreSQL's
// multixact race (reproduced under load: a head held FOR KEY SHARE by a producer, updated while
// another updater of it aborted), and nothing else, not even another internal error.
func TestConflict(t *testing.T) {
	t.Parallel()
	multixact := &pgconn.PgError{Code: "XX000",
		Message: "new multixact has more than one updating member: 0 4[173471 (keysh), 173565 (nokeyupd), 173568 (fornokeyupd), 173568 (nokeyupd)]"}
	for _, err := range []error{
		&pgconn.PgError{Code: "40P01", Message: "deadlock detected"},
		&pgconn.PgError{Code: "40001", Message: "could not serialize access due to concurrent update"},
		multixact,
		fmt.Errorf("recording results: %w", multixact),
	} {
		if Conflict(err) == "" {
			t.Errorf("Conflict(%v) = \"\", want a cause", err)
		}
	}
	for _, err := range []error{
		nil,
		errors.New("deadlock detected"),
		&pgconn.PgError{Code: "XX000", Message: "cache lookup failed for function 123"},
		&pgconn.PgError{Code: "22023", Message: "batch_size must be between 1 and 10000, got 0"},
		&pgconn.PgError{Code: "57P01", Message: "terminating connection due to administrator command"},
	} {
		if cause := Conflict(err); cause != "" {
			t.Errorf("Conflict(%v) = %q, want \"\"", err, cause)
		}
	}
}

// TestCancelled pins which server errors are the server cancelling a call on its own timeouts or
// an operator's request (a result flush is retried while its leases last), and nothing else.
func TestCancelled(t *testing.T) {
	t.Parallel()
	for _, err := range []error{
		&pgconn.PgError{Code: "55P03", Message: "canceling statement due to lock timeout"},
		&pgconn.PgError{Code: "57014", Message: "canceling statement due to statement timeout"},
		fmt.Errorf("recording results: %w", &pgconn.PgError{Code: "57014", Message: "canceling statement due to user request"}),
	} {
		if Cancelled(err) == "" {
			t.Errorf("Cancelled(%v) = \"\", want a cause", err)
		}
	}
	for _, err := range []error{
		nil,
		errors.New("canceling statement due to lock timeout"),
		&pgconn.PgError{Code: "40P01", Message: "deadlock detected"},
		&pgconn.PgError{Code: "57P01", Message: "terminating connection due to administrator command"},
		&pgconn.PgError{Code: "55000", Message: "object not in prerequisite state"},
	} {
		if cause := Cancelled(err); cause != "" {
			t.Errorf("Cancelled(%v) = %q, want \"\"", err, cause)
		}
	}
}

// TestUnavailable_ReadOnlyIsNotCalledAStandby: a primary whose default_transaction_read_only is on
// refuses writes with the same 25006 as a standby, so a write refused "in a read-only transaction"
// names both and how to tell them apart; only an error that says "during recovery" (which only a
// server in recovery raises) calls the server a standby. Before, every 25006 was "a read-only
// standby: pgdrain needs the primary", also on the primary.
func TestUnavailable_ReadOnlyIsNotCalledAStandby(t *testing.T) {
	t.Parallel()
	refused := fmt.Errorf("claiming batch: %w", &pgconn.PgError{Code: "25006", Message: "cannot execute UPDATE in a read-only transaction"})
	cause := Unavailable(refused)
	if cause != ReadOnlyCause || !ReadOnly(refused) {
		t.Errorf("Unavailable(%v) = %q (ReadOnly %v), want ReadOnlyCause", refused, cause, ReadOnly(refused))
	}
	for _, want := range []string{"standby", "pg_is_in_recovery()", "default_transaction_read_only = on", "RESET default_transaction_read_only"} {
		if !strings.Contains(cause, want) {
			t.Errorf("the cause of a refused write does not name %q: %s", want, cause)
		}
	}
	if strings.HasPrefix(cause, "the server is a read-only standby") {
		t.Errorf("a refused write is called a standby: %s", cause)
	}
	for _, err := range []error{
		&pgconn.PgError{Code: "25006", Message: "cannot execute LISTEN during recovery"},
		&pgconn.PgError{Code: "0A000", Message: "cannot access temporary or unlogged relations during recovery"},
	} {
		if cause := Unavailable(err); !strings.HasPrefix(cause, "the server is a read-only standby") {
			t.Errorf("Unavailable(%v) = %q, want the standby's cause", err, cause)
		}
	}
	if ReadOnly(&pgconn.PgError{Code: "0A000", Message: "cannot access temporary or unlogged relations during recovery"}) {
		t.Error("ReadOnly is true for 0A000")
	}
}
