package gocheck

import (
	"context"
	"log/slog"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/pgdrain/pgdrain/escalation"
	"github.com/pgdrain/pgdrain/internal/testdb"
)

// A primary whose default_transaction_read_only is on for the engine's role refuses every take
// (25006); once the DBA lifts it the engine delivers without a restart, and its health is OK again
// as soon as a take succeeds, while that take's deliveries still run. Before, the pool's sessions
// kept the setting they began with and every take still failed until the pool retired them (an
// hour by default), and Health kept the last failed take's error through the next pass's
// deliveries. Run as pgdrain_worker.
func TestEscalation_DeliversOnceAReadOnlyDefaultIsLifted(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	db := testdb.New(t)
	policy := ladderPolicy(t, db.Pool, "telegram", "0s", "1 hour")
	firingAlert(t, db.Pool, "payments down", policy, time.Second)
	login := loginURL(t, db, "pgdrain_worker")
	u, err := url.Parse(login)
	require.NoError(t, err)
	role := pgx.Identifier{u.User.Username()}.Sanitize()
	exec(t, db.Pool, "ALTER ROLE "+role+" SET default_transaction_read_only = on")
	pool, err := pgxpool.New(ctx, login)
	require.NoError(t, err)
	t.Cleanup(pool.Close)

	var logs syncBuffer
	telegram := &fakeTelegram{}
	delivering, release := make(chan struct{}), make(chan struct{})
	slow := escalation.NotifierFunc(func(ctx context.Context, s escalation.Step) error {
		close(delivering)
		<-release
		return escalation.TelegramNotifier{Sender: telegram}.Notify(ctx, s)
	})
	engine := newEngine(t, pool, map[string]escalation.Notifier{"telegram": slow},
		escalation.Config{Tick: 50 * time.Millisecond, StepTimeout: 30 * time.Second, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	runCtx, stop := context.WithCancel(ctx)
	run := escRun(runCtx, engine)
	escWaitWhileRunning(t, run, "a few refused takes", func() bool {
		return strings.Count(logs.String(), "taking due steps failed") >= 2
	})
	require.Empty(t, telegram.messages())
	require.False(t, engine.Health(ctx).OK, "not healthy while takes are refused")

	exec(t, db.Pool, "ALTER ROLE "+role+" RESET default_transaction_read_only")
	select {
	case <-delivering:
	case <-time.After(20 * time.Second):
		t.Fatal("no delivery began after the RESET")
	}
	h := engine.Health(ctx)
	require.True(t, h.OK, "healthy while the first good take's delivery runs: %+v", h)
	require.Empty(t, h.Error)
	close(release)
	escWaitWhileRunning(t, run, "the step delivered once writes are allowed", func() bool {
		return len(telegram.messages()) == 1
	})
	stop()
	require.NoError(t, escRunEnded(t, run, 10*time.Second))
	require.NotContains(t, logs.String(), "read-only standby", "a primary is not called a standby")
}
