package gocheck

import (
	"context"
	"io"
	"log/slog"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/pgdrain/pgdrain/escalation"
	"github.com/pgdrain/pgdrain/internal/testdb"
)

// An engine whose database answers pings but refuses every take (here every transaction is read
// only, as on a standby a DSN reaches after a failover) is not healthy: /healthz answers 503 with
// the take's error while a step is due and nothing is delivered. Before, it answered 200 ok:true.
func TestEscalation_HealthIsNotOKWhileTakesFail(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	db := testdb.New(t)
	policy := ladderPolicy(t, db.Pool, "telegram", "0s")
	firingAlert(t, db.Pool, "disk full", policy, time.Second)

	cfg, err := pgxpool.ParseConfig(loginURL(t, db, "pgdrain_worker"))
	require.NoError(t, err)
	cfg.ConnConfig.RuntimeParams["default_transaction_read_only"] = "on"
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	require.NoError(t, err)
	defer pool.Close()
	engine := newEngine(t, pool, map[string]escalation.Notifier{"telegram": escalation.TelegramNotifier{Sender: &fakeTelegram{}}},
		escalation.Config{Tick: 20 * time.Millisecond, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	go func() { _ = engine.Run(runCtx) }()
	srv := httptest.NewServer(engine.Handler(prometheus.NewRegistry()))
	defer srv.Close()

	require.Eventually(t, func() bool { return engine.Health(ctx).Error != "" }, 10*time.Second, 20*time.Millisecond,
		"a take failed")
	resp, err := srv.Client().Get(srv.URL + "/healthz")
	require.NoError(t, err)
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.Equal(t, 503, resp.StatusCode, "not healthy while every take fails: %s", body)
	require.Contains(t, string(body), `"ok":false`)
	require.Contains(t, string(body), `"database":"ok"`, "the ping alone succeeds")
	require.True(t, strings.Contains(string(body), "read-only transaction"), "the take's error is reported: %s", body)
	require.Empty(t, journal(t, db.Pool), "nothing was delivered")
}
