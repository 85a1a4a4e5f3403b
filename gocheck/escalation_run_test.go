package gocheck

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pgdrain/pgdrain/escalation"
	"github.com/pgdrain/pgdrain/internal/testdb"
)

// Run walks a whole ladder — telegram now, the webhook 300ms later — delivering each step once,
// and ends it (stop_reason completed). The webhook receives the alert, the step and an
// Idempotency-Key of escalation id and step index.
func TestEscalation_RunDeliversWholeLadderThroughWebhook(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	db := testdb.New(t)

	var mu sync.Mutex
	var hooks []escalation.WebhookPayload
	var keys []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var p escalation.WebhookPayload
		if err := json.NewDecoder(r.Body).Decode(&p); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		mu.Lock()
		hooks = append(hooks, p)
		keys = append(keys, r.Header.Get("Idempotency-Key"))
		mu.Unlock()
	}))
	defer srv.Close()

	var policy string
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT alr.create_policy('two', jsonb_build_array(
		jsonb_build_object('delay', '0s', 'channel', 'telegram', 'target', '@oncall'),
		jsonb_build_object('delay', '300 milliseconds', 'channel', 'webhook', 'target', $1::text)))::text`,
		srv.URL).Scan(&policy))
	alertID, ladder := firingAlert(t, db.Pool, "payments 5xx", policy, 0)

	telegram := &fakeTelegram{}
	engine := newEngine(t, db.Pool, map[string]escalation.Notifier{
		"telegram": escalation.TelegramNotifier{Sender: telegram},
		"webhook":  escalation.WebhookNotifier{},
	}, escalation.Config{Tick: 50 * time.Millisecond})
	runErr := make(chan error, 1)
	go func() { runErr <- engine.Run(ctx) }()

	require.Eventually(t, func() bool { return len(journal(t, db.Pool)) == 2 }, 10*time.Second, 25*time.Millisecond)
	cancel()
	require.NoError(t, <-runErr, "Run stops cleanly on cancel")

	require.Equal(t, []string{"@oncall: ALERT payments 5xx is firing (escalation step 1)"}, telegram.messages())
	mu.Lock()
	defer mu.Unlock()
	require.Equal(t, []string{ladder + ":1"}, keys)
	require.Equal(t, escalation.WebhookPayload{
		IdempotencyKey: ladder + ":1",
		Alert:          escalation.WebhookAlert{ID: alertID, Name: "payments 5xx"},
		Step: escalation.WebhookStep{EscalationID: ladder, Index: 1, Channel: "webhook", Target: srv.URL,
			Message: "ALERT payments 5xx is firing (escalation step 2)"},
	}, hooks[0])
	require.Equal(t, map[string]int{ladder + ":0": 1, ladder + ":1": 1}, deliveriesPerStep(t, db.Pool))
	var reason string
	require.NoError(t, db.Pool.QueryRow(context.Background(), `SELECT stop_reason FROM alr.alert_escalations WHERE id = $1::uuid`, ladder).Scan(&reason))
	require.Equal(t, "completed", reason)
}

// A stopped engine finishes the step in hand (it was recorded, so it is delivered) and releases
// the rest of its batch, so another engine takes them at once instead of after the 2-minute lease.
func TestEscalation_StoppedEngineReleasesUnappliedSteps(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testdb.New(t)
	pager := newHangingChannel()
	defer pager.unblock()
	slow := ladderPolicy(t, db.Pool, "pager", "0s")
	fast := ladderPolicy(t, db.Pool, "telegram", "0s")
	_, first := firingAlert(t, db.Pool, "first", slow, 3*time.Second)
	_, second := firingAlert(t, db.Pool, "second", fast, 2*time.Second)
	_, third := firingAlert(t, db.Pool, "third", fast, 1*time.Second)

	telegramA, telegramB := &fakeTelegram{}, &fakeTelegram{}
	stopping := newEngine(t, db.Pool, map[string]escalation.Notifier{
		"pager": pager, "telegram": escalation.TelegramNotifier{Sender: telegramA}}, escalation.Config{})
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan tickOutcome, 1)
	go func() {
		res, err := stopping.RunOnce(runCtx)
		done <- tickOutcome{res, err}
	}()
	pager.waitEntered(t)
	stop()
	pager.unblock()
	out := <-done
	require.NoError(t, out.err)
	require.Equal(t, escalation.TickResult{Taken: 3, Delivered: 1, Released: 2}, out.res,
		"the recorded step is still delivered after the stop; the rest is released")
	require.Empty(t, telegramA.messages())

	other := newEngine(t, db.Pool, map[string]escalation.Notifier{
		"telegram": escalation.TelegramNotifier{Sender: telegramB}}, escalation.Config{})
	res, err := other.RunOnce(ctx)
	require.NoError(t, err)
	require.Equal(t, escalation.TickResult{Taken: 2, Delivered: 2}, res, "released steps are taken at once")
	require.Equal(t, map[string]int{first + ":0": 1, second + ":0": 1, third + ":0": 1}, deliveriesPerStep(t, db.Pool))
}
