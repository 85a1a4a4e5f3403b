package gocheck

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pgdrain/pgdrain/drainer"
)

// An Applier that honours its context and times out (a peer that does not answer) returns a moment
// after its ctx ended. In lock mode with ApplyConcurrency > 1 (or a batch whose last wave used the
// whole bound) that deadline is the batch's settle time itself, and the batch stopped waiting at
// exactly that instant: the timeout's result was dropped as if the Applier ignored its context
// ("an Applier ignores its context" at Warn), no attempt was counted, no backoff set, no last_error
// written, and the row was claimed again at once, for ever: a peer that never answers never
// poisoned its row, and every batch waited for it.
func TestDrainer_LockMode_AnApplyThatTimesOutOnItsContextIsRecorded(t *testing.T) {
	t.Parallel()
	q := drNewQueue(t, drQueueOpts{maxAttempts: 3})
	id := q.enqueue(t, "a", "hang", 1)
	var calls atomic.Int32
	apply := func(ctx context.Context, _ string, e drEvent) error {
		calls.Add(1)
		<-ctx.Done() // a peer that never answers; the Applier honours its context
		return ctx.Err()
	}
	logger, buf := drCapture(t)
	cfg := q.config(drainer.ClaimLock)
	cfg.ApplyConcurrency = 2
	cfg.ApplyTimeout = 200 * time.Millisecond
	d, _ := drNew(t, q.pool, cfg, apply, drainer.WithLogger[drEvent](logger))
	stop := drStart(t, d)
	// Three attempts, each ApplyTimeout, then the queue's backoff (at most 200ms): poisoned
	// within a few seconds. Before the fix the row was claimed again and again with no attempt
	// counted.
	drWaitFor(t, 10*time.Second, "the row poisoned after max_attempts timeouts", func() bool {
		return q.count(t, `SELECT count(*) FROM public.events WHERE id = $1 AND attempt_count = 3`, id) == 1
	})
	require.NoError(t, stop())
	require.Equal(t, int32(3), calls.Load(), "one apply per attempt")
	var lastError string
	require.NoError(t, q.pool.QueryRow(context.Background(),
		`SELECT last_error FROM public.events WHERE id = $1`, id).Scan(&lastError))
	require.Contains(t, lastError, "context deadline exceeded")
	require.NotContains(t, buf.String(), "an Applier ignores its context",
		"an Applier that returned on its context is not blamed for ignoring it")
}
