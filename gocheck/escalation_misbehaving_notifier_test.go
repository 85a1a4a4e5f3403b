package gocheck

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"runtime"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/pgdrain/pgdrain/escalation"
	"github.com/pgdrain/pgdrain/internal/testdb"
)

// escRun runs engine.Run(ctx) on a goroutine of its own and sends how it ended: its error, or an
// error saying that it panicked or that runtime.Goexit ended its goroutine (so that a test fails
// instead of crashing or waiting forever).
func escRun(ctx context.Context, engine *escalation.Engine) <-chan error {
	ended := make(chan error, 1)
	go func() {
		finished := false
		defer func() {
			if finished {
				return
			}
			if p := recover(); p != nil {
				ended <- fmt.Errorf("Run panicked: %v", p)
				return
			}
			ended <- errors.New("Run's goroutine was ended by runtime.Goexit")
		}()
		err := engine.Run(ctx)
		finished = true
		ended <- err
	}()
	return ended
}

// escWaitWhileRunning polls cond until it holds, failing the test after 10s or as soon as Run
// ends, with how it ended.
func escWaitWhileRunning(t *testing.T, run <-chan error, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		select {
		case err := <-run:
			t.Fatalf("waiting for %s: Run ended first: %v", what, err)
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("waiting for %s: not within 10s", what)
		}
	}
}

// escRunEnded waits up to within for Run to end after its ctx ended and returns its error.
func escRunEnded(t *testing.T, run <-chan error, within time.Duration) error {
	t.Helper()
	select {
	case err := <-run:
		return err
	case <-time.After(within):
		t.Fatalf("Run still running %s after its ctx ended", within)
		return nil
	}
}

// escJournaled returns the outcome and error text of every journal row of a ladder's step.
func escJournaled(t *testing.T, pool *pgxpool.Pool, escalationID string, stepIdx int) []string {
	t.Helper()
	rows, err := pool.Query(context.Background(), `SELECT outcome || coalesce(': ' || error, '')
		FROM alr.delivery_journal WHERE escalation_id = $1::uuid AND step_idx = $2 ORDER BY id`, escalationID, stepIdx)
	require.NoError(t, err)
	var out []string
	for rows.Next() {
		var s string
		require.NoError(t, rows.Scan(&s))
		out = append(out, s)
	}
	require.NoError(t, rows.Err())
	return out
}

// ignoringNotifier hangs on the steps of alert "stuck" until released, ignoring its context (a
// client without a timeout that honours nothing); it delivers every other step at once.
type ignoringNotifier struct {
	entered chan escalation.Step
	release chan struct{}
}

func newIgnoringNotifier(t *testing.T) *ignoringNotifier {
	n := &ignoringNotifier{entered: make(chan escalation.Step, 16), release: make(chan struct{})}
	t.Cleanup(func() {
		select {
		case <-n.release:
		default:
			close(n.release)
		}
	})
	return n
}

func (n *ignoringNotifier) Notify(_ context.Context, s escalation.Step) error {
	if s.AlertName != "stuck" {
		return nil
	}
	n.entered <- s
	<-n.release
	return nil
}

func (n *ignoringNotifier) waitEntered(t *testing.T) escalation.Step {
	t.Helper()
	select {
	case s := <-n.entered:
		return s
	case <-time.After(10 * time.Second):
		t.Fatal("the ignoring notifier was never called")
		return escalation.Step{}
	}
}

// A Notifier that panics, returns a typed nil error (its Error panics when the engine reads the
// text to journal it) or calls runtime.Goexit (t.FailNow in a test's Notifier) costs only its
// step: the step is journaled as a failed delivery with what happened, the steps after it in the
// batch and the ladder's next step are delivered, and Run returns nil when its ctx ends. Before,
// the panic came out of Run (crashing the process), and Goexit ended Run's goroutine.
func TestEscalation_MisbehavingNotifierCostsOnlyItsStep(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name      string
		notify    func() error
		journaled string
	}{
		{"panic", func() error { panic("pager client bug") }, "failed: notifier panicked: pager client bug"},
		{"typed nil error", func() error {
			var err *misbehaving
			return err
		}, "failed: notifier panicked: runtime error: invalid memory address or nil pointer dereference"},
		{"goexit", func() error {
			runtime.Goexit()
			return nil
		}, "failed: the notifier called runtime.Goexit (t.FailNow or t.Fatal in a test) instead of returning"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			db := testdb.New(t)
			policy := ladderPolicy(t, db.Pool, "pager", "0s", "200 milliseconds")
			_, before := firingAlert(t, db.Pool, "before", policy, 3*time.Second)
			_, bad := firingAlert(t, db.Pool, "bad", policy, 2*time.Second)
			_, after := firingAlert(t, db.Pool, "after", policy, time.Second)
			pager := escalation.NotifierFunc(func(_ context.Context, s escalation.Step) error {
				if s.AlertName == "bad" && s.StepIdx == 0 {
					return tc.notify()
				}
				return nil
			})
			logger, logs := newEscLog(t)
			engine := newEngine(t, db.Pool, map[string]escalation.Notifier{"pager": pager},
				escalation.Config{Tick: 20 * time.Millisecond, Logger: logger})
			run := escRun(ctx, engine)
			escWaitWhileRunning(t, run, "both steps of the three ladders journaled", func() bool {
				return len(journal(t, db.Pool)) == 6
			})
			cancel()
			require.NoError(t, escRunEnded(t, run, 5*time.Second), "Run returns nil when its ctx ends")

			require.Equal(t, []string{tc.journaled}, escJournaled(t, db.Pool, bad, 0))
			require.Equal(t, []string{"delivered"}, escJournaled(t, db.Pool, bad, 1), "the ladder's next step is the retry")
			for _, id := range []string{before, after} {
				for step := range 2 {
					require.Equal(t, []string{"delivered"}, escJournaled(t, db.Pool, id, step))
				}
			}
			require.Contains(t, logs.String(), "level=ERROR msg=\"escalation notifier panicked or ended its goroutine")
		})
	}
}

// A Notifier that ignores its context does not hold Run's shutdown: Run returns at most
// StepTimeout plus OverrunGrace after the call began, the call is journaled as a failed delivery
// whose outcome is unknown (not delivered again: the step is recorded), and the rest of the batch
// is given back unapplied. Before, Run never returned and the rest of the batch stayed leased.
func TestEscalation_NotifierIgnoringItsContextDoesNotHoldRunsShutdown(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	db := testdb.New(t)
	policy := ladderPolicy(t, db.Pool, "pager", "0s")
	_, stuck := firingAlert(t, db.Pool, "stuck", policy, 2*time.Second)
	_, next := firingAlert(t, db.Pool, "next", policy, time.Second)
	pager := newIgnoringNotifier(t)
	logger, _ := newEscLog(t)
	const stepTimeout = 300 * time.Millisecond
	engine := newEngine(t, db.Pool, map[string]escalation.Notifier{"pager": pager},
		escalation.Config{StepTimeout: stepTimeout, Logger: logger})
	run := escRun(ctx, engine)
	pager.waitEntered(t)
	began := time.Now()
	cancel()
	require.NoError(t, escRunEnded(t, run, stepTimeout+escalation.OverrunGrace+3*time.Second))
	require.Less(t, time.Since(began), stepTimeout+escalation.OverrunGrace+time.Second,
		"Run returned about StepTimeout plus OverrunGrace after the call began")

	require.Equal(t, []string{"failed: the notifier ignored its context: still running 1s after its StepTimeout " +
		"(300ms) ended; given up on, the outcome is unknown"}, escJournaled(t, db.Pool, stuck, 0))
	st := ladderState(t, db.Pool, next)
	require.Equal(t, 0, st.StepIdx, "the rest of the batch is not applied")
	require.False(t, st.Leased, "the rest of the batch is given back: no lease, no token")
	require.False(t, st.TokenIsSet)
	require.Empty(t, escJournaled(t, db.Pool, next, 0))
}

// While a call the engine gave up on still runs (its Notifier ignores its context), Health is not
// OK and names the channel and the step (GET /healthz answers 503), and
// pgdrain_escalation_overrunning_deliveries counts it; the steps after it in the batch are
// delivered meanwhile. Once the call returns, Health is OK again, and the step keeps its one
// journal row (failed: the late outcome is only logged). Before, the engine waited for the call,
// delivering nothing, while Health reported it OK.
func TestEscalation_NotifierIgnoringItsContextIsReportedByHealthWhileItRuns(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	db := testdb.New(t)
	policy := ladderPolicy(t, db.Pool, "pager", "0s")
	_, stuck := firingAlert(t, db.Pool, "stuck", policy, 2*time.Second)
	_, next := firingAlert(t, db.Pool, "next", policy, time.Second)
	pager := newIgnoringNotifier(t)
	logger, logs := newEscLog(t)
	reg := prometheus.NewRegistry()
	engine := newEngine(t, db.Pool, map[string]escalation.Notifier{"pager": pager},
		escalation.Config{StepTimeout: 300 * time.Millisecond, Tick: 20 * time.Millisecond, Logger: logger, Registerer: reg})
	run := escRun(ctx, engine)
	step := pager.waitEntered(t)
	called := time.Now()

	escWaitWhileRunning(t, run, "Health to report the overrunning call", func() bool {
		return len(engine.Health(ctx).Overrunning) == 1
	})
	h := engine.Health(ctx)
	require.False(t, h.OK)
	require.Equal(t, "running", h.State)
	require.Equal(t, "pager", h.Overrunning[0].Channel)
	require.Equal(t, stuck+":0", h.Overrunning[0].Step)
	require.WithinDuration(t, called, h.Overrunning[0].Started, time.Second)
	require.EqualValues(t, 1, escMetric(t, reg, "pgdrain_escalation_overrunning_deliveries", nil))
	rec := httptest.NewRecorder()
	engine.Handler(reg).ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/healthz", nil))
	require.Equal(t, http.StatusServiceUnavailable, rec.Code)
	var body map[string]any
	require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &body))
	require.Equal(t, []any{map[string]any{"channel": "pager", "step": step.IdempotencyKey(),
		"started": h.Overrunning[0].Started.Format(time.RFC3339Nano)}}, body["overrunning"])

	escWaitWhileRunning(t, run, "the step behind the stuck one delivered", func() bool {
		return len(escJournaled(t, db.Pool, next, 0)) == 1
	})
	require.Equal(t, []string{"delivered"}, escJournaled(t, db.Pool, next, 0))
	require.Len(t, engine.Health(ctx).Overrunning, 1, "the call still runs")

	close(pager.release)
	escWaitWhileRunning(t, run, "Health OK again once the call returned", func() bool {
		h := engine.Health(ctx)
		return h.OK && len(h.Overrunning) == 0
	})
	require.EqualValues(t, 0, escMetric(t, reg, "pgdrain_escalation_overrunning_deliveries", nil))
	require.Contains(t, logs.String(), "escalation notifier given up on has returned")
	cancel()
	require.NoError(t, escRunEnded(t, run, 5*time.Second))
	require.Equal(t, []string{"failed: the notifier ignored its context: still running 1s after its StepTimeout " +
		"(300ms) ended; given up on, the outcome is unknown"}, escJournaled(t, db.Pool, stuck, 0),
		"one journal row: the late return is not journaled again")
}

// A served step is delivered within two ticks however many unserved steps are due before it: here
// more than MaxBatchSize (the most one RunOnce holds) plus two batches. The first tick holds
// MaxBatchSize of them leased and carries them to the next, whose takes go past them; the tick
// that reaches the end of the due steps gives every unserved step back (unapplied, no lease).
// Before, every tick took and released the same 10,100 unserved steps, one round trip each, and
// delivered nothing.
func TestEscalation_ServedStepDeliveredBesideMoreThanMaxBatchSizeUnservedSteps(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testdb.New(t)
	smsPolicy := ladderPolicy(t, db.Pool, "sms", "0s")
	unserved := escalation.MaxBatchSize + 2*escalation.DefaultBatchSize + 50
	_, err := db.Pool.Exec(ctx, `SELECT count(alr.start_escalation(alr.add_alert('sms ' || i), $1::uuid))
		FROM generate_series(1, $2) i`, smsPolicy, unserved)
	require.NoError(t, err)
	_, err = db.Pool.Exec(ctx, `UPDATE alr.alert_escalations SET next_at = now() - interval '1 minute'`)
	require.NoError(t, err)
	_, served := firingAlert(t, db.Pool, "api 5xx", ladderPolicy(t, db.Pool, "telegram", "0s"), 0)

	logger, _ := newEscLog(t)
	engine := newEngine(t, db.Pool, map[string]escalation.Notifier{
		"telegram": escalation.TelegramNotifier{Sender: &fakeTelegram{}},
	}, escalation.Config{Logger: logger})
	var ticks []escalation.TickResult
	for len(ticks) < 2 && len(escJournaled(t, db.Pool, served, 0)) == 0 {
		res, err := engine.RunOnce(ctx)
		require.NoError(t, err)
		ticks = append(ticks, res)
	}
	require.Equal(t, []string{"delivered"}, escJournaled(t, db.Pool, served, 0), "delivered within two ticks: %+v", ticks)
	require.Equal(t, []escalation.TickResult{
		{Taken: escalation.MaxBatchSize, Unserved: escalation.MaxBatchSize},
		{Taken: unserved - escalation.MaxBatchSize + 1, Delivered: 1, Unserved: unserved - escalation.MaxBatchSize},
	}, ticks)
	var leased, applied int
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE lease_token IS NOT NULL OR leased_until IS NOT NULL),
		count(*) FILTER (WHERE step_idx > 0) FROM alr.alert_escalations WHERE id <> $1::uuid`, served).Scan(&leased, &applied))
	require.Zero(t, leased, "every unserved step is given back once a take reaches the end of the due steps")
	require.Zero(t, applied, "no unserved step was applied")
}
