package gocheck

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pgdrain/pgdrain/drainer"
)

// Each kind of apply result lands in the row as the SQL contract says: nil = sent, an unmarked
// error = transient (retried), Permanent = poisoned, a panic = poisoned with the panic text, a
// payload that does not decode = poisoned; and the counters agree.
func TestDrainer_Outcomes_SentTransientPermanentPanicDecode(t *testing.T) {
	t.Parallel()
	drEachMode(t, func(t *testing.T, mode drainer.ClaimMode) {
		q := drNewQueue(t, drQueueOpts{maxAttempts: 5})
		ctx := context.Background()
		okID := q.enqueue(t, "a", "ok", 1)
		flakyID := q.enqueue(t, "b", "flaky", 1)
		permID := q.enqueue(t, "c", "reject", 1)
		panicID := q.enqueue(t, "d", "panic", 1)
		var badID int64
		require.NoError(t, q.pool.QueryRow(ctx,
			`SELECT outbox.enqueue($1, 'garbled', '{"seq": "not a number"}')`, q.table).Scan(&badID))

		var mu sync.Mutex
		flakyCalls := 0
		d, reg := drNew(t, q.pool, q.config(mode), func(ctx context.Context, typ string, e drEvent) error {
			switch e.Op {
			case "flaky":
				mu.Lock()
				defer mu.Unlock()
				flakyCalls++
				if flakyCalls == 1 {
					return errors.New("peer unavailable")
				}
			case "reject":
				return drErr("peer said 422: %w", drainer.Permanent(errors.New("unprocessable")))
			case "panic":
				var m map[string]int
				m["boom"]++ // nil map write: a real panic
			}
			return nil
		})
		stop := drStart(t, d)
		drWaitFor(t, 10*time.Second, "ok and flaky sent", func() bool { return q.sent(t) == 2 })
		require.NoError(t, stop())

		type row struct {
			sent     bool
			attempts int
			lastErr  string
		}
		get := func(id int64) row {
			var r row
			var le *string
			require.NoError(t, q.pool.QueryRow(ctx,
				`SELECT sent_at IS NOT NULL, attempt_count, last_error FROM public.events WHERE id = $1`, id).
				Scan(&r.sent, &r.attempts, &le))
			if le != nil {
				r.lastErr = *le
			}
			return r
		}
		require.Equal(t, row{sent: true}, get(okID))
		flaky := get(flakyID)
		require.True(t, flaky.sent, "the transient failure was retried and sent")
		require.Equal(t, 1, flaky.attempts, "one failed attempt counted")
		require.Equal(t, row{attempts: 5, lastErr: "peer said 422: unprocessable"}, get(permID))
		p := get(panicID)
		require.Equal(t, 5, p.attempts, "a panic poisons")
		require.Contains(t, p.lastErr, "panic: assignment to entry in nil map")
		bad := get(badID)
		require.Equal(t, 5, bad.attempts, "a payload that does not decode poisons")
		require.Contains(t, bad.lastErr, "decoding payload")
		require.Equal(t, 2, flakyCalls)

		require.Equal(t, 2.0, drResults(t, reg, "sent"))
		require.Equal(t, 1.0, drResults(t, reg, "transient"))
		require.Equal(t, 3.0, drResults(t, reg, "permanent"))
		require.Equal(t, 0.0, drMetric(t, reg, "pgdrain_outbox_lease_lost_total", nil))
		require.Equal(t, 3.0, drMetric(t, reg, "pgdrain_outbox_poisoned", nil))
		require.Equal(t, 0.0, drMetric(t, reg, "pgdrain_outbox_backlog_depth", nil))
	})
}
