package gocheck

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/pgdrain/pgdrain/drainer"
	"github.com/pgdrain/pgdrain/relay"
)

// A primary whose default_transaction_read_only is on for the relay's role (ALTER ROLE ... SET, a
// DBA's step during maintenance or a mistaken setting) answers pings and refuses every claim with
// SQLSTATE 25006. The relay keeps retrying, but says so: /healthz answers 503 with the claim's
// error and a cause that names the setting and the role it was set for (not a standby: the server
// is not in recovery), logged once at Warn; nothing is delivered. Once the DBA lifts it, the relay
// delivers without a restart. Before, /healthz answered 200 ok:true, the log called the primary "a
// read-only standby", and after the RESET every claim still failed: the pool's sessions kept the
// setting they began with.
func TestRelay_HealthIsNotOKWhileTheDatabaseRefusesWrites(t *testing.T) {
	t.Parallel()
	drEachMode(t, func(t *testing.T, mode drainer.ClaimMode) {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		q := drNewQueue(t, drQueueOpts{partitionColumn: "partition_key"})
		q.enqueue(t, "k", "op", 0)
		login := loginURL(t, q.db, "pgdrain_worker")
		u, err := url.Parse(login)
		require.NoError(t, err)
		role := pgx.Identifier{u.User.Username()}.Sanitize()
		_, err = q.db.Pool.Exec(ctx, "ALTER ROLE "+role+" SET default_transaction_read_only = on")
		require.NoError(t, err)
		pool, err := pgxpool.New(ctx, login)
		require.NoError(t, err)
		defer pool.Close()

		var logs syncBuffer
		reg := prometheus.NewRegistry()
		sink := &rlSink{}
		r, err := relay.New(pool, []relay.Route{rlRoute(q, mode, sink, 1, 1)},
			relay.WithLogger(slog.New(slog.NewTextHandler(&logs, nil))), relay.WithMetrics(reg))
		require.NoError(t, err)
		runCtx, stop := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- r.Run(runCtx) }()
		defer func() {
			stop()
			require.NoError(t, <-done)
		}()
		srv := httptest.NewServer(r.Handler(reg))
		defer srv.Close()

		drWaitFor(t, 10*time.Second, "the queue's health to say claims fail", func() bool {
			h := r.Health(ctx)
			return len(h.Queues) == 1 && h.Queues[0].Error != ""
		})
		code, body := rlGet(t, srv.URL+"/healthz")
		require.Equal(t, http.StatusServiceUnavailable, code, "not healthy while every claim is refused: %s", body)
		var h relay.Health
		require.NoError(t, json.Unmarshal([]byte(body), &h), body)
		require.False(t, h.OK)
		require.Equal(t, "ok", h.Database, "the ping alone succeeds")
		require.Len(t, h.Queues, 1)
		require.Equal(t, "running", h.Queues[0].State, "the relay keeps retrying")
		require.Contains(t, h.Queues[0].Error, "read-only transaction", body)
		require.Contains(t, h.Queues[0].Cause, "default_transaction_read_only = on, set for role "+role, body)
		require.Contains(t, h.Queues[0].Cause, "ALTER ROLE "+role+" RESET default_transaction_read_only", body)
		require.NotContains(t, h.Queues[0].Cause, "standby", "the server is a primary: %s", body)
		require.Nil(t, h.Queues[0].LastClaim, "no claim succeeded")
		events, _ := sink.snapshot()
		require.Empty(t, events, "nothing was delivered")

		// The true cause at Warn, once for the streak; the retries go on meanwhile.
		drWaitFor(t, 10*time.Second, "a few retries", func() bool {
			text := logs.String()
			return strings.Count(text, "claiming batch failed")+strings.Count(text, "draining batch failed") >= 3
		})
		text := logs.String()
		require.Equal(t, 1, strings.Count(text, "the database refuses writes"), text)
		require.Contains(t, text, "level=WARN msg=\"the database refuses writes", text)
		require.NotContains(t, text, "read-only standby", "a primary is not called a standby: %s", text)

		// The DBA lifts it: the relay delivers without a restart, and is healthy again.
		_, err = q.db.Pool.Exec(ctx, "ALTER ROLE "+role+" RESET default_transaction_read_only")
		require.NoError(t, err)
		drWaitFor(t, 20*time.Second, "the event sent once writes are allowed again", func() bool { return q.sent(t) == 1 })
		drWaitFor(t, 10*time.Second, "/healthz 200 again", func() bool {
			code, _ := rlGet(t, srv.URL+"/healthz")
			return code == http.StatusOK
		})
		h = r.Health(ctx)
		require.Empty(t, h.Queues[0].Error)
		require.Empty(t, h.Queues[0].Cause)
		require.NotNil(t, h.Queues[0].LastClaim, fmt.Sprintf("%+v", h))
	})
}
