package cli

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

// runOffline runs pgdrain against a DSN nobody answers: a usage error is reported before any
// connection (exit 2), anything that gets past the checks fails to connect (exit 3).
func runOffline(t *testing.T, args ...string) (int, string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code := Run(context.Background(), append([]string{"--dsn", "postgres://nobody@127.0.0.1:1/none?connect_timeout=1"}, args...), &out, &errOut)
	return code, errOut.String()
}

// --attempts is a row's attempt_count, an integer (int4) column: a count past 2147483647 is no
// row's. It was sent to the database, which (or pgx, before it) refused it with exit 3 and an
// error that named "args[2]" or "type integer", not --attempts.
func TestRun_RefusesAnAttemptCountNoRowCanHave(t *testing.T) {
	t.Parallel()
	for _, cmd := range []string{"skip", "retry"} {
		for _, v := range []string{"2147483648", "9223372036854775807"} {
			code, stderr := runOffline(t, cmd, "public.events", "5", "--attempts", v, "--reason", "bad row")
			if code != ExitUsage || !strings.Contains(stderr, "--attempts must be between 0 and 2147483647") {
				t.Errorf("%s --attempts %s: exit %d, stderr %q; want exit 2 naming --attempts and its range", cmd, v, code, stderr)
			}
		}
		code, stderr := runOffline(t, cmd, "public.events", "5", "--attempts", "2147483647", "--reason", "bad row")
		if code != ExitDatabase || !strings.Contains(stderr, "connecting to database") {
			t.Errorf("%s --attempts 2147483647: exit %d, stderr %q; want it to get past the checks", cmd, code, stderr)
		}
	}
}

// A --reason of white space the SQL functions call blank (outbox._is_blank: a no-break space, a
// zero-width space, a byte order mark...) is refused before anything is sent, with a usage error,
// as a reason of plain spaces is; it went to the database, whose refusal exited 3 ("database").
func TestRun_RefusesAReasonTheDatabaseCallsBlank(t *testing.T) {
	t.Parallel()
	for _, reason := range []string{"", "   ", "\u00a0", "\u200b", "\ufeff\u2060", "\u3000\u180e", "\v\f"} {
		for _, args := range [][]string{
			{"skip", "public.events", "5", "--attempts", "1", "--reason", reason},
			{"retry", "public.events", "5", "--attempts", "1", "--reason", reason},
			{"dismiss", "public.events", "5", "--reason", reason},
		} {
			code, stderr := runOffline(t, args...)
			if code != ExitUsage || !strings.Contains(stderr, "--reason must be a non-blank text") {
				t.Errorf("%s --reason %q: exit %d, stderr %q; want exit 2 naming --reason", args[0], reason, code, stderr)
			}
		}
	}
	code, stderr := runOffline(t, "skip", "public.events", "5", "--attempts", "1", "--reason", "\u00a0peer gone\u00a0")
	if code != ExitDatabase {
		t.Errorf("a reason with text in it: exit %d, stderr %q; want it to get past the checks", code, stderr)
	}
}

// --refresh is bounded above too (a day), before anything connects: twice it is the history the
// throughput figures keep, and 100000d overflowed that.
func TestWeb_RefusesARefreshOverADay(t *testing.T) {
	t.Setenv("PGDRAIN_WEB_TOKEN", "")
	t.Setenv("PGDRAIN_WEB_BASIC_AUTH", "")
	for _, v := range []string{"1d1s", "100000d"} {
		code, stderr := runOffline(t, "web", "--refresh", v)
		if code != ExitUsage || !strings.Contains(stderr, "--refresh must be between 1s and 1d") {
			t.Errorf("--refresh %s: exit %d, stderr %q; want exit 2 naming --refresh and its range", v, code, stderr)
		}
	}
}

// A QUEUE that can not be a queue's name (empty, as `pgdrain stats "$QUEUE"` gives with the variable
// unset; white space; SQL) is a usage error, exit 2 before connecting, as an unknown queue is exit
// 2: the SQL functions refused it with 22023, which exited 3, the code of a database that refuses
// or can not be reached.
func TestRun_RefusesAQueueThatIsNoName(t *testing.T) {
	t.Parallel()
	for _, queue := range []string{"", "   ", "public.", ".events", "public.events; DROP TABLE x", "a.b.c", "1abc", "public.\"Events\""} {
		for _, args := range [][]string{
			{"stats", queue}, {"wedged", queue}, {"poisoned", queue}, {"requeue", queue, "--all"}, {"check", queue},
			{"skip", queue, "5", "--attempts", "1", "--reason", "r"}, {"dismiss", queue, "5", "--reason", "r"},
			{"actions", queue}, {"purge", queue}, {"fanout", "add", queue, "s1"},
		} {
			code, stderr := runOffline(t, args...)
			if code != ExitUsage || !strings.Contains(stderr, `QUEUE must be a plain name "schema.table" (letters, digits, _)`) {
				t.Errorf("%q: exit %d, stderr %q; want exit 2 naming QUEUE and its rule", args, code, stderr)
			}
		}
	}
	for _, queue := range []string{"events", "public.events", "Public.Events_2", "_x._y"} {
		code, stderr := runOffline(t, "stats", queue)
		if code != ExitDatabase || !strings.Contains(stderr, "connecting to database") {
			t.Errorf("stats %q: exit %d, stderr %q; want it to get past the checks", queue, code, stderr)
		}
	}
}
