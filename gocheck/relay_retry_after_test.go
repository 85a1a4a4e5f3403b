package gocheck

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pgdrain/pgdrain/drainer"
	"github.com/pgdrain/pgdrain/relay"
)

// A webhook peer that answers 429 with Retry-After: 120 gets the event again in 120 seconds, not
// after the queue's backoff (50-200ms here): the relay records the row's next attempt through
// drainer.RetryAt, fenced like every result. The stored next_attempt_at is checked against the
// moment the peer answered plus the header's 120 seconds (bracketed by when the row was seen
// recorded), not against how long anything took. The producer's headers reach the peer. The
// relay runs as pgdrain_worker, the producer as pgdrain_producer.
func TestRelay_RetryAfterIsTheRowsNextAttempt(t *testing.T) {
	t.Parallel()
	drEachMode(t, func(t *testing.T, mode drainer.ClaimMode) {
		ctx := context.Background()
		q := drNewQueue(t, drQueueOpts{partitionColumn: "partition_key"})
		var eventID string
		require.NoError(t, loginPool(t, q.db, "pgdrain_producer").QueryRow(ctx,
			`SELECT event_id::text FROM outbox.enqueue_event($1, 'order.created', '{"order": 1}', 'k', headers => '{"x-tenant": "acme"}')`,
			q.table).Scan(&eventID))

		var mu sync.Mutex
		var answeredAt time.Time
		var calls int
		var got http.Header
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			_, _ = io.Copy(io.Discard, r.Body)
			mu.Lock()
			defer mu.Unlock()
			calls++
			got = r.Header.Clone()
			answeredAt = time.Now()
			w.Header().Set("Retry-After", "120")
			w.WriteHeader(http.StatusTooManyRequests)
		}))
		defer srv.Close()
		_, reg, stop := rlStart(t, loginPool(t, q.db, "pgdrain_worker"), []relay.Route{rlWebhookRoute(t, q, mode, srv.URL)})
		drWaitFor(t, 30*time.Second, "the 429 recorded", func() bool {
			return q.count(t, `SELECT count(*) FROM public.events WHERE attempt_count = 1`) == 1
		})
		seenRecorded := time.Now()
		require.NoError(t, stop())

		var next time.Time
		var lastError string
		require.NoError(t, q.pool.QueryRow(ctx, `SELECT next_attempt_at, last_error FROM public.events WHERE event_id = $1`, eventID).
			Scan(&next, &lastError))
		mu.Lock()
		defer mu.Unlock()
		require.Equal(t, 1, calls, "the peer was not called again before its Retry-After")
		require.Equal(t, eventID, got.Get("webhook-id"), "webhook-id is the event_id")
		require.Equal(t, "acme", got.Get("X-Tenant"), "the producer's header reached the peer")
		lowest := answeredAt.Add(120 * time.Second).Truncate(time.Microsecond)
		highest := seenRecorded.Add(120 * time.Second)
		require.False(t, next.Before(lowest), "next attempt %s is before the peer's answer + 120s (%s)", next, lowest)
		require.False(t, next.After(highest), "next attempt %s is after the row was seen recorded + 120s (%s)", next, highest)
		require.Contains(t, lastError, "429 Too Many Requests")
		require.Contains(t, lastError, "the peer asked to retry after 2m0s")
		require.Equal(t, 1.0, drMetric(t, reg, "pgdrain_relay_retry_after_total", map[string]string{"queue": q.table, "sink": "webhook"}))
	})
}
