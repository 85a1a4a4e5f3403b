package gocheck

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pgdrain/pgdrain/drainer"
)

// A permanent failure poisons the event: it will never be delivered unless an operator requeues
// it, so the drainer says so at Warn with the queue, id, partition key and error (issue 13, item 6).
// A transient failure stays at Debug (it is retried). The line carries the error's first 1000 bytes
// (errtext.LogBytes); the row keeps up to 4000.
func TestDrainer_PoisonedEventIsLoggedAtWarn(t *testing.T) {
	pageOf422 := "peer says 422: " + strings.Repeat("x", 3000)
	t.Parallel()
	drEachMode(t, func(t *testing.T, mode drainer.ClaimMode) {
		q := drNewQueue(t, drQueueOpts{partitionColumn: "resource_id"})
		bad := q.enqueue(t, "k-bad", "op", 1)
		flaky := q.enqueue(t, "k-flaky", "op", 1)
		worker := loginPool(t, q.db, "pgdrain_worker")
		var failedOnce atomic.Bool
		apply := func(ctx context.Context, _ string, _ drEvent) error {
			ev, _ := drainer.EventFrom(ctx)
			switch {
			case ev.ID == bad:
				return drainer.Permanent(errors.New(pageOf422))
			case ev.ID == flaky && failedOnce.CompareAndSwap(false, true):
				return errors.New("peer says 503")
			}
			return nil
		}
		logger, buf := drCapture(t)
		cfg := q.config(mode)
		d, _ := drNew(t, worker, cfg, apply, drainer.WithLogger[drEvent](logger))
		stop := drStart(t, d)
		drWaitFor(t, 10*time.Second, "the flaky row sent and the bad one poisoned", func() bool {
			return q.sent(t) == 1 && q.count(t, `SELECT count(*) FROM public.events WHERE attempt_count >= 10`) == 1
		})
		require.NoError(t, stop())

		var poisoned, transient string
		for l := range strings.Lines(buf.String()) {
			if strings.Contains(l, `msg="apply failed"`) && strings.Contains(l, "outcome=permanent") {
				poisoned = l
			}
			if strings.Contains(l, `msg="apply failed"`) && strings.Contains(l, "outcome=transient") {
				transient = l
			}
		}
		require.Contains(t, poisoned, "level=WARN")
		require.Contains(t, poisoned, "queue=public.events")
		require.Contains(t, poisoned, "partition_key=k-bad")
		require.Contains(t, poisoned, `err="`+pageOf422[:1000]+`"`, "the line has the error's first 1000 bytes")
		require.NotContains(t, poisoned, pageOf422[:1001])
		require.EqualValues(t, 1, q.count(t, `SELECT count(*) FROM public.events WHERE last_error = '`+pageOf422+`'`),
			"the row keeps the whole error")
		require.Contains(t, transient, "level=DEBUG")
	})
}
