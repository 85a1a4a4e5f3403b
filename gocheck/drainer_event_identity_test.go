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

// The Applier sees each event's stable identity and headers (drainer.EventFrom), and a transient
// error made with drainer.RetryAt is recorded with that time as the row's next attempt instead of
// the queue's backoff. The drainer runs as pgdrain_worker, the producer as pgdrain_producer.
func TestDrainer_EventIdentityHeadersAndRetryAt(t *testing.T) {
	t.Parallel()
	drEachMode(t, func(t *testing.T, mode drainer.ClaimMode) {
		q := drNewQueue(t, drQueueOpts{partitionColumn: "resource_id"})
		ctx := context.Background()
		producer := loginPool(t, q.db, "pgdrain_producer")
		const given = "6f1c7a52-3b7e-4f6e-9d2a-0c5b8e1f2a3d"
		var okEventID, laterEventID string
		require.NoError(t, producer.QueryRow(ctx, `SELECT event_id::text FROM outbox.enqueue_event($1, 'ok', '{"key": "a", "op": "ok"}', 'a',
			headers => '{"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}')`, q.table).Scan(&okEventID))
		require.NoError(t, producer.QueryRow(ctx, `SELECT event_id::text FROM outbox.enqueue_event($1, 'later', '{"key": "b", "op": "later"}', 'b',
			event_id => $2)`, q.table, given).Scan(&laterEventID))
		require.Equal(t, given, laterEventID)

		retryAt := time.Now().Add(time.Hour).Truncate(time.Microsecond)
		var mu sync.Mutex
		seen := map[string]drainer.Event{}
		d, _ := drNew(t, loginPool(t, q.db, "pgdrain_worker"), q.config(mode), func(ctx context.Context, typ string, e drEvent) error {
			ev, ok := drainer.EventFrom(ctx)
			require.True(t, ok)
			mu.Lock()
			seen[typ] = ev
			mu.Unlock()
			if typ == "later" {
				return drainer.RetryAt(errors.New("peer said 429, Retry-After: 3600"), retryAt)
			}
			return nil
		})
		stop := drStart(t, d)
		drWaitFor(t, 10*time.Second, "both applied and recorded", func() bool {
			return q.count(t, `SELECT count(*) FROM public.events WHERE sent_at IS NOT NULL OR attempt_count > 0`) == 2
		})
		require.NoError(t, stop())

		mu.Lock()
		defer mu.Unlock()
		require.Equal(t, okEventID, seen["ok"].EventID)
		require.Equal(t, map[string]string{"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}, seen["ok"].Headers)
		require.Equal(t, given, seen["later"].EventID)
		require.Nil(t, seen["later"].Headers)

		var next time.Time
		var attempts int
		require.NoError(t, q.pool.QueryRow(ctx, `SELECT next_attempt_at, attempt_count FROM public.events WHERE event_id = $1`, given).
			Scan(&next, &attempts))
		require.Equal(t, 1, attempts)
		require.True(t, next.Equal(retryAt), "next attempt %s, asked for %s", next, retryAt)
	})
}
