package gocheck

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/pgdrain/pgdrain/escalation"
	"github.com/pgdrain/pgdrain/internal/testdb"
)

// An engine killed between recording a step (apply_escalation) and delivering it leaves a page
// probably never sent, and its ladder goes on. A running engine finds such a step once it has been
// unjournaled for longer than an engine delivers and journals one: it sets
// pgdrain_escalation_unjournaled_steps and logs the step once at Error, with its target. A step
// journaled later leaves the count. Before, nothing showed it. Run as pgdrain_worker.
func TestEscalation_AStepRecordedAndNeverJournaledIsReported(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	db := testdb.New(t)
	policy := ladderPolicy(t, db.Pool, "telegram", "0s", "1 hour")
	_, ladder := firingAlert(t, db.Pool, "payments down", policy, time.Second)
	worker := loginPool(t, db, "pgdrain_worker")

	// The killed engine: it took the step and recorded it, and was gone before delivering it.
	var token string
	require.NoError(t, worker.QueryRow(ctx, `SELECT lease_token::text FROM alr.take_due_steps()`).Scan(&token))
	var applied bool
	require.NoError(t, worker.QueryRow(ctx, `SELECT alr.apply_escalation($1::uuid, $2::uuid)`, ladder, token).Scan(&applied))
	require.True(t, applied)
	// An hour later (the owner moves the record back).
	exec(t, db.Pool, `UPDATE alr.alert_escalations SET unjournaled_since = now() - interval '1 hour'`)

	var logs syncBuffer
	reg := prometheus.NewRegistry()
	telegram := &fakeTelegram{}
	engine := newEngine(t, worker, map[string]escalation.Notifier{"telegram": escalation.TelegramNotifier{Sender: telegram}},
		escalation.Config{Registerer: reg, Tick: 50 * time.Millisecond, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	runCtx, stop := context.WithCancel(ctx)
	run := escRun(runCtx, engine)
	escWaitWhileRunning(t, run, "the unjournaled step counted", func() bool {
		return escMetric(t, reg, "pgdrain_escalation_unjournaled_steps", nil) == 1
	})
	escWaitWhileRunning(t, run, "the unjournaled step logged", func() bool {
		return strings.Contains(logs.String(), "escalation step recorded and never journaled")
	})
	require.Contains(t, logs.String(), "escalation_id="+ladder)
	require.Contains(t, logs.String(), "target=telegram-0")
	require.Empty(t, telegram.messages(), "the engine does not deliver it (at most once: its delivery may have started)")
	stop()
	require.NoError(t, escRunEnded(t, run, 10*time.Second))

	// The killed engine's journal call arrives after all (it was slow, not dead): the step leaves
	// the list.
	var id *int64
	require.NoError(t, worker.QueryRow(ctx, `SELECT alr.record_delivery($1::uuid, 0, $2::uuid)`, ladder, token).Scan(&id))
	require.NotNil(t, id)
	var left int
	require.NoError(t, worker.QueryRow(ctx, `SELECT count(*)::int FROM alr.unjournaled_steps(interval '0')`).Scan(&left))
	require.Zero(t, left)
}
