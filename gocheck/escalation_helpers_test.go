package gocheck

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/pgdrain/pgdrain/escalation"
)

// ladderPolicy creates a policy whose steps all use channel and target, with the given delays.
func ladderPolicy(t *testing.T, pool *pgxpool.Pool, channel string, delays ...string) string {
	t.Helper()
	steps := "["
	for i, d := range delays {
		if i > 0 {
			steps += ","
		}
		steps += fmt.Sprintf(`{"delay":%q,"channel":%q,"target":"%s-%d"}`, d, channel, channel, i)
	}
	steps += "]"
	var id string
	require.NoError(t, pool.QueryRow(context.Background(),
		`SELECT alr.create_policy($1, $2::jsonb)::text`, channel+" policy", steps).Scan(&id))
	return id
}

// firingAlert adds an alert and starts its ladder over policyID; the ladder's first step is made
// due `ago` in the past, so batches have a known order (take_due_steps orders by next_at).
func firingAlert(t *testing.T, pool *pgxpool.Pool, name, policyID string, ago time.Duration) (alertID, escalationID string) {
	t.Helper()
	ctx := context.Background()
	require.NoError(t, pool.QueryRow(ctx, `SELECT alr.add_alert($1)::text`, name).Scan(&alertID))
	escalationID = startLadder(t, pool, alertID, policyID, ago)
	return alertID, escalationID
}

func startLadder(t *testing.T, pool *pgxpool.Pool, alertID, policyID string, ago time.Duration) string {
	t.Helper()
	ctx := context.Background()
	var id string
	require.NoError(t, pool.QueryRow(ctx, `SELECT alr.start_escalation($1::uuid, $2::uuid)::text`,
		alertID, policyID).Scan(&id))
	_, err := pool.Exec(ctx, `UPDATE alr.alert_escalations SET next_at = now() - $2::interval WHERE id = $1::uuid`,
		id, ago)
	require.NoError(t, err)
	return id
}

// journalEntry is one row of alr.delivery_journal.
type journalEntry struct {
	EscalationID string
	StepIdx      int
	LeaseToken   string
	Outcome      string
}

func journal(t *testing.T, pool *pgxpool.Pool) []journalEntry {
	t.Helper()
	rows, err := pool.Query(context.Background(),
		`SELECT escalation_id::text, step_idx, lease_token::text, outcome FROM alr.delivery_journal ORDER BY id`)
	require.NoError(t, err)
	defer rows.Close()
	var out []journalEntry
	for rows.Next() {
		var e journalEntry
		require.NoError(t, rows.Scan(&e.EscalationID, &e.StepIdx, &e.LeaseToken, &e.Outcome))
		out = append(out, e)
	}
	require.NoError(t, rows.Err())
	return out
}

// deliveriesPerStep counts journal rows per "<escalation_id>:<step_idx>".
func deliveriesPerStep(t *testing.T, pool *pgxpool.Pool) map[string]int {
	t.Helper()
	m := map[string]int{}
	for _, e := range journal(t, pool) {
		m[fmt.Sprintf("%s:%d", e.EscalationID, e.StepIdx)]++
	}
	return m
}

// waitLeasesExpired waits (on the database clock) until no step is leased any more.
func waitLeasesExpired(t *testing.T, pool *pgxpool.Pool) {
	t.Helper()
	require.Eventually(t, func() bool {
		var live int
		require.NoError(t, pool.QueryRow(context.Background(),
			`SELECT count(*) FROM alr.alert_escalations WHERE leased_until > now()`).Scan(&live))
		return live == 0
	}, 10*time.Second, 25*time.Millisecond)
}

// fakeTelegram is an in-memory TelegramSender: it records every message.
type fakeTelegram struct {
	mu   sync.Mutex
	sent []string // "<chat>: <text>"
}

func (f *fakeTelegram) SendMessage(_ context.Context, chatID, text string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.sent = append(f.sent, chatID+": "+text)
	return nil
}

func (f *fakeTelegram) messages() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.sent...)
}

// hangingChannel is a Notifier that hangs like a stuck network call: it signals entered, then
// blocks until the test calls unblock (or the step timeout ends the call).
type hangingChannel struct {
	entered   chan escalation.Step
	unblocked chan struct{}
	once      sync.Once
	mu        sync.Mutex
	delivered []escalation.Step
}

func newHangingChannel() *hangingChannel {
	return &hangingChannel{entered: make(chan escalation.Step, 16), unblocked: make(chan struct{})}
}

func (h *hangingChannel) Notify(ctx context.Context, s escalation.Step) error {
	h.entered <- s
	select {
	case <-h.unblocked:
		h.mu.Lock()
		h.delivered = append(h.delivered, s)
		h.mu.Unlock()
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (h *hangingChannel) unblock() { h.once.Do(func() { close(h.unblocked) }) }

func (h *hangingChannel) waitEntered(t *testing.T) escalation.Step {
	t.Helper()
	select {
	case s := <-h.entered:
		return s
	case <-time.After(10 * time.Second):
		t.Fatal("the hanging channel was never called")
		return escalation.Step{}
	}
}

func newEngine(t *testing.T, pool *pgxpool.Pool, notifiers map[string]escalation.Notifier, cfg escalation.Config) *escalation.Engine {
	t.Helper()
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(t.Output(), nil))
	}
	e, err := escalation.New(pool, notifiers, cfg)
	require.NoError(t, err)
	return e
}
