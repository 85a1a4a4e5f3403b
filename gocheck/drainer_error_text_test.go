package gocheck

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/stretchr/testify/require"

	"github.com/pgdrain/pgdrain/drainer"
)

// errTextRow is what a check reads back of one row: its result, attempts and last_error.
type errTextRow struct {
	sent     bool
	attempts int
	lastErr  string
}

// errTextRows reads every row of the check's queue by op (each op is enqueued once).
func errTextRows(t *testing.T, q *drQueue) map[string]errTextRow {
	t.Helper()
	rows, err := q.pool.Query(context.Background(),
		`SELECT payload->>'op', sent_at IS NOT NULL, attempt_count, coalesce(last_error, '') FROM public.events`)
	require.NoError(t, err)
	defer rows.Close()
	out := map[string]errTextRow{}
	for rows.Next() {
		var op string
		var r errTextRow
		require.NoError(t, rows.Scan(&op, &r.sent, &r.attempts, &r.lastErr))
		require.True(t, utf8.ValidString(r.lastErr), "op %s: last_error is valid UTF-8", op)
		require.LessOrEqual(t, len(r.lastErr), 4000, "op %s: last_error is bounded", op)
		out[op] = r
	}
	require.NoError(t, rows.Err())
	return out
}

// errTextMaxAttempts is the max_attempts of the error-text checks' queues: a transient failure
// is delivered that many times, then poisoned (the queues are unpartitioned).
const errTextMaxAttempts = 3

// errTextEnqueue enqueues one event per op, on one key, in order.
func errTextEnqueue(t *testing.T, q *drQueue, ops []string) {
	t.Helper()
	for i, op := range ops {
		q.enqueue(t, "k", op, i)
	}
}

// errTextSettle waits until every row of q is sent or poisoned, then calls stop.
func errTextSettle(t *testing.T, q *drQueue, rows int, stop func() error) {
	t.Helper()
	drWaitFor(t, 20*time.Second, "every row sent or poisoned", func() bool {
		return q.count(t, `SELECT count(*) FROM public.events WHERE sent_at IS NOT NULL OR attempt_count = $1`,
			errTextMaxAttempts) == int64(rows)
	})
	require.NoError(t, stop())
}

// errTextDrain enqueues one event per op, drains them in mode with an Applier answering fail(op)
// until every row is sent or poisoned, and returns the rows by op and how often each op was
// applied.
func errTextDrain(t *testing.T, q *drQueue, mode drainer.ClaimMode, ops []string, fail func(op string) error) (map[string]errTextRow, map[string]int) {
	t.Helper()
	errTextEnqueue(t, q, ops)
	var mu sync.Mutex
	applied := map[string]int{}
	d, _ := drNew(t, q.pool, q.config(mode), func(ctx context.Context, typ string, e drEvent) error {
		mu.Lock()
		applied[e.Op]++
		mu.Unlock()
		return fail(e.Op)
	})
	errTextSettle(t, q, len(ops), drStart(t, d))
	mu.Lock()
	defer mu.Unlock()
	return errTextRows(t, q), applied
}

// An Applier's error text is recorded whatever it holds: invalid UTF-8, NUL bytes, a multi-byte
// character across the 4000-byte limit, a megabyte of text. Each result of a batch is recorded
// once, so the accepted events are applied exactly once, the permanent failures once (poisoned),
// the transient ones max_attempts times (then poisoned, the queue being unpartitioned). One
// result PostgreSQL refuses even so (a retry time out of its range, SQLSTATE 22008) costs
// nothing but itself: the batch is recorded row by row, and that row with its text escaped to
// ASCII and the queue's backoff. Before, the whole apply_results / settle_locked call failed
// (SQLSTATE 22021), every row of the batch was delivered again, and none was ever recorded.
func TestDrainer_UnrecordableErrorTextsCostNoResult(t *testing.T) {
	t.Parallel()
	drEachMode(t, func(t *testing.T, mode drainer.ClaimMode) {
		q := drNewQueue(t, drQueueOpts{maxAttempts: errTextMaxAttempts})
		ops := []string{"ok-1", "ok-2", "ok-3", "nul", "invalid", "split", "huge", "nul-transient", "out-of-range"}
		rows, applied := errTextDrain(t, q, mode, ops, func(op string) error {
			switch op {
			case "nul":
				return drainer.Permanent(errors.New("bad\x00request"))
			case "invalid":
				return drainer.Permanent(errors.New("bad \xff\xfe bytes"))
			case "split":
				return drainer.Permanent(errors.New(strings.Repeat("a", 3999) + "é"))
			case "huge":
				return drainer.Permanent(errors.New(strings.Repeat("日", 1<<20)))
			case "nul-transient":
				return errors.New("try\x00later \xc3")
			case "out-of-range":
				return drainer.RetryAt(errors.New("slow down\x00"), time.Date(-10000, 1, 1, 0, 0, 0, 0, time.UTC))
			}
			return nil
		})
		for _, op := range []string{"ok-1", "ok-2", "ok-3"} {
			require.Equal(t, errTextRow{sent: true}, rows[op], op)
			require.Equal(t, 1, applied[op], "%s: an accepted event is applied once", op)
		}
		for op, want := range map[string]string{
			"nul":     "bad\uFFFDrequest",
			"invalid": "bad \uFFFD bytes",
			"split":   strings.Repeat("a", 3999),
			"huge":    strings.Repeat("日", 1333),
		} {
			require.Equal(t, errTextRow{attempts: 3, lastErr: want}, rows[op], op)
			require.Equal(t, 1, applied[op], "%s: a permanent failure is applied once and poisoned", op)
		}
		require.Equal(t, errTextRow{attempts: 3, lastErr: "try\uFFFDlater \uFFFD"}, rows["nul-transient"])
		require.Equal(t, 3, applied["nul-transient"], "a transient failure is applied max_attempts times")
		oor := rows["out-of-range"]
		require.Equal(t, 3, oor.attempts, "the refused result is recorded, with the queue's backoff")
		require.Contains(t, oor.lastErr, "22008")
		require.Contains(t, oor.lastErr, `"slow down\ufffd"`, "the error text, escaped to ASCII")
		require.Equal(t, 3, applied["out-of-range"])
	})
}

// A database whose encoding lacks a character of an error text (LATIN1, and a peer's Japanese)
// refuses the text however clean its UTF-8 (SQLSTATE 22P05). The batch is recorded row by row:
// the accepted rows once, the refused one with its text escaped to ASCII, poisoned as its
// permanent outcome says. Before, no result of the batch was ever recorded.
func TestDrainer_ErrorTextTheServerEncodingLacksIsRecordedEscaped(t *testing.T) {
	t.Parallel()
	drEachMode(t, func(t *testing.T, mode drainer.ClaimMode) {
		q := drNewEncodedQueue(t, "LATIN1", drQueueOpts{maxAttempts: errTextMaxAttempts})
		ops := []string{"ok-1", "ok-2", "latin", "japanese"}
		rows, applied := errTextDrain(t, q, mode, ops, func(op string) error {
			switch op {
			case "latin":
				return drainer.Permanent(errors.New("refusé"))
			case "japanese":
				return drainer.Permanent(errors.New("拒否されました"))
			}
			return nil
		})
		for _, op := range ops {
			require.Equal(t, 1, applied[op], "%s is applied once", op)
		}
		require.Equal(t, errTextRow{sent: true}, rows["ok-1"])
		require.Equal(t, errTextRow{sent: true}, rows["ok-2"])
		require.Equal(t, errTextRow{attempts: 3, lastErr: "refusé"}, rows["latin"], "a text the encoding holds is recorded as it is")
		japanese := rows["japanese"]
		require.Equal(t, 3, japanese.attempts)
		require.Contains(t, japanese.lastErr, "22P05")
		require.Contains(t, japanese.lastErr, `"\u62d2\u5426\u3055\u308c\u307e\u3057\u305f"`, "the error text, escaped to ASCII")
	})
}

// A peer's Retry-After further ahead than the queue's max_delay (00025, default 7 days) is refused
// by the server (SQLSTATE 22023, issue 30 item 2): the drainer records that row with the queue's
// backoff instead, saying why in its error text, and the rest of the batch as it was. Nothing is
// parked for 30 days, nothing is left unrecorded.
func TestDrainer_RetryAtBeyondMaxDelayIsRecordedWithTheBackoff(t *testing.T) {
	t.Parallel()
	drEachMode(t, func(t *testing.T, mode drainer.ClaimMode) {
		q := drNewQueue(t, drQueueOpts{maxAttempts: errTextMaxAttempts})
		ops := []string{"ok-1", "too-far", "ok-2"}
		rows, applied := errTextDrain(t, q, mode, ops, func(op string) error {
			if op == "too-far" {
				return drainer.RetryAt(errors.New("429, Retry-After: 30 days"), time.Now().Add(30*24*time.Hour))
			}
			return nil
		})
		require.Equal(t, errTextRow{sent: true}, rows["ok-1"])
		require.Equal(t, errTextRow{sent: true}, rows["ok-2"])
		far := rows["too-far"]
		require.Equal(t, errTextMaxAttempts, far.attempts, "each refused result is recorded, with the queue's backoff")
		require.Contains(t, far.lastErr, "22023")
		require.Contains(t, far.lastErr, "max_delay")
		require.Equal(t, errTextMaxAttempts, applied["too-far"])
	})
}
