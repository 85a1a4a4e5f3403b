package gocheck

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/pgdrain/pgdrain/escalation"
	"github.com/pgdrain/pgdrain/internal/testdb"
)

// escLog is an engine logger that keeps every line (Debug and up) for assertions and prints them
// when the test fails.
type escLog struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *escLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *escLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

func newEscLog(t *testing.T) (*slog.Logger, *escLog) {
	t.Helper()
	l := &escLog{}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("engine log:\n%s", l.String())
		}
	})
	return slog.New(slog.NewTextHandler(l, &slog.HandlerOptions{Level: slog.LevelDebug})), l
}

// escMetric returns the value of counter or gauge name with the given labels, or 0 when absent.
func escMetric(t *testing.T, reg *prometheus.Registry, name string, labels map[string]string) float64 {
	t.Helper()
	families, err := reg.Gather()
	require.NoError(t, err)
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
	next:
		for _, m := range f.GetMetric() {
			have := map[string]string{}
			for _, l := range m.GetLabel() {
				have[l.GetName()] = l.GetValue()
			}
			for k, v := range labels {
				if have[k] != v {
					continue next
				}
			}
			if m.Counter != nil {
				return m.GetCounter().GetValue()
			}
			return m.GetGauge().GetValue()
		}
	}
	return 0
}

// ladderRow is the part of a ladder a lost page would change.
type ladderRow struct {
	StepIdx    int
	NextAt     time.Time
	Leased     bool
	TokenIsSet bool
}

func ladderState(t *testing.T, pool *pgxpool.Pool, id string) ladderRow {
	t.Helper()
	var r ladderRow
	require.NoError(t, pool.QueryRow(context.Background(), `SELECT step_idx, next_at, leased_until IS NOT NULL,
		lease_token IS NOT NULL FROM alr.alert_escalations WHERE id = $1::uuid`, id).
		Scan(&r.StepIdx, &r.NextAt, &r.Leased, &r.TokenIsSet))
	return r
}

// No lost page (issue 13, item 5). A due step on a channel no notifier serves ("sms") is checked
// before anything is recorded: it is not applied (step_idx and next_at unchanged, nothing
// journaled), it is given back (no lease, no token, so the next take gets it at once), the engine
// logs an error naming the channel and counts it in pgdrain_escalation_unserved_steps_total; the
// telegram step in the same batch is delivered as usual. Taken again, the same happens. An engine
// that has a notifier for sms then delivers the step, once, and the ladder advances.
func TestEscalation_UnservedChannel_StepNotAppliedUntilANotifierServesIt(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testdb.New(t)
	smsLadder := func() string {
		_, id := firingAlert(t, db.Pool, "disk full", ladderPolicy(t, db.Pool, "sms", "0s", "5 minutes"), time.Minute)
		return id
	}()
	_, tgLadder := firingAlert(t, db.Pool, "api 5xx", ladderPolicy(t, db.Pool, "telegram", "0s", "5 minutes"), 0)
	before := ladderState(t, db.Pool, smsLadder)

	reg := prometheus.NewRegistry()
	logger, logs := newEscLog(t)
	telegram := &fakeTelegram{}
	misconfigured := newEngine(t, db.Pool, map[string]escalation.Notifier{
		"telegram": escalation.TelegramNotifier{Sender: telegram},
	}, escalation.Config{Logger: logger, Registerer: reg})

	unserved, err := misconfigured.UnservedChannels(ctx)
	require.NoError(t, err)
	require.Equal(t, []escalation.ChannelUse{{Channel: "sms", Policies: 1, RunningLadders: 1}}, unserved,
		"the start-up check names the channel no notifier serves")
	require.EqualValues(t, 1, escMetric(t, reg, "pgdrain_escalation_unserved_channels", nil))

	for round := 1; round <= 2; round++ {
		res, err := misconfigured.RunOnce(ctx)
		require.NoError(t, err)
		want := escalation.TickResult{Taken: 2, Delivered: 1, Unserved: 1}
		if round == 2 {
			want = escalation.TickResult{Taken: 1, Unserved: 1} // telegram's next step is 5 minutes away
		}
		require.Equal(t, want, res, "round %d", round)
		require.Equal(t, before, ladderState(t, db.Pool, smsLadder),
			"round %d: the sms step is not applied and is given back: same step, same next_at, no lease, no token", round)
		require.EqualValues(t, round, escMetric(t, reg, "pgdrain_escalation_unserved_steps_total", map[string]string{"channel": "sms"}))
		require.EqualValues(t, round, escMetric(t, reg, "pgdrain_escalation_steps_total", map[string]string{"outcome": "unserved"}))
	}
	require.Equal(t, map[string]int{tgLadder + ":0": 1}, deliveriesPerStep(t, db.Pool), "only the telegram step reached anyone")
	require.Len(t, telegram.messages(), 1)
	log := logs.String()
	require.Equal(t, 1, strings.Count(log, "level=ERROR"), "an error the first time (then at most once a minute)")
	require.Equal(t, 1, strings.Count(log, "level=DEBUG msg=\"escalation steps not applied"), "the repeat at Debug")
	require.Contains(t, log, "channel=sms")
	require.Contains(t, log, `no notifier for the step's channel \"sms\"`)
	require.Contains(t, log, "first_step="+smsLadder+":0")

	var sms []escalation.Step
	var mu sync.Mutex
	fixed := newEngine(t, db.Pool, map[string]escalation.Notifier{
		"telegram": escalation.TelegramNotifier{Sender: telegram},
		"sms": escalation.NotifierFunc(func(_ context.Context, s escalation.Step) error {
			mu.Lock()
			defer mu.Unlock()
			sms = append(sms, s)
			return nil
		}),
	}, escalation.Config{})
	unserved, err = fixed.UnservedChannels(ctx)
	require.NoError(t, err)
	require.Empty(t, unserved)
	res, err := fixed.RunOnce(ctx)
	require.NoError(t, err)
	require.Equal(t, escalation.TickResult{Taken: 1, Delivered: 1}, res)
	require.Len(t, sms, 1)
	require.Equal(t, "sms-0", sms[0].Target)
	require.Equal(t, "disk full", sms[0].AlertName)
	require.Equal(t, map[string]int{tgLadder + ":0": 1, smsLadder + ":0": 1}, deliveriesPerStep(t, db.Pool))
	require.Equal(t, 1, ladderState(t, db.Pool, smsLadder).StepIdx, "the ladder advanced once the step was delivered")
}

// Unserved steps keep their next_at, so every take would return them first: when they fill a take,
// the engine keeps them leased and takes again, so the steps behind them are delivered in the same
// RunOnce, and gives all of them back at the end.
func TestEscalation_UnservedSteps_DoNotStarveTheOthers(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testdb.New(t)
	smsPolicy := ladderPolicy(t, db.Pool, "sms", "0s")
	var smsLadders []string
	for i := range 5 {
		_, id := firingAlert(t, db.Pool, "sms alert", smsPolicy, time.Hour-time.Duration(i)*time.Minute)
		smsLadders = append(smsLadders, id)
	}
	tgPolicy := ladderPolicy(t, db.Pool, "telegram", "0s")
	_, tg1 := firingAlert(t, db.Pool, "tg alert 1", tgPolicy, time.Second)
	_, tg2 := firingAlert(t, db.Pool, "tg alert 2", tgPolicy, 0)

	logger, _ := newEscLog(t)
	engine := newEngine(t, db.Pool, map[string]escalation.Notifier{
		"telegram": escalation.TelegramNotifier{Sender: &fakeTelegram{}},
	}, escalation.Config{BatchSize: 3, Logger: logger})
	res, err := engine.RunOnce(ctx)
	require.NoError(t, err)
	// Takes: [sms sms sms] held, [sms sms tg1] held, [tg2] not full: 7 taken.
	require.Equal(t, escalation.TickResult{Taken: 7, Delivered: 2, Unserved: 5}, res)
	require.Equal(t, map[string]int{tg1 + ":0": 1, tg2 + ":0": 1}, deliveriesPerStep(t, db.Pool))
	for _, id := range smsLadders {
		st := ladderState(t, db.Pool, id)
		require.Equal(t, 0, st.StepIdx)
		require.False(t, st.Leased, "every held sms step is given back at the end")
		require.False(t, st.TokenIsSet)
	}
}

// Run checks the policies' channels against its notifiers at start and warns about each channel
// nobody serves (it does not fail: an engine that refuses to start pages nobody), then keeps
// delivering the channels it serves.
func TestEscalation_RunWarnsAtStartAboutUnservedChannels(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	db := testdb.New(t)
	ladderPolicy(t, db.Pool, "sms", "0s")
	_, tg := firingAlert(t, db.Pool, "api 5xx", ladderPolicy(t, db.Pool, "telegram", "0s"), 0)
	reg := prometheus.NewRegistry()
	logger, logs := newEscLog(t)
	engine := newEngine(t, db.Pool, map[string]escalation.Notifier{
		"telegram": escalation.TelegramNotifier{Sender: &fakeTelegram{}},
	}, escalation.Config{Tick: 20 * time.Millisecond, Logger: logger, Registerer: reg})
	runErr := make(chan error, 1)
	go func() { runErr <- engine.Run(ctx) }()
	require.Eventually(t, func() bool { return deliveriesPerStep(t, db.Pool)[tg+":0"] == 1 }, 10*time.Second, 20*time.Millisecond)
	cancel()
	require.NoError(t, <-runErr)
	log := logs.String()
	require.Contains(t, log, "level=WARN msg=\"escalation channel has no notifier")
	require.Contains(t, log, "channel=sms policies=1 running_ladders=0")
	require.NotContains(t, log, "level=ERROR", "a policy nobody started yet is a warning, not a lost page")
	require.EqualValues(t, 1, escMetric(t, reg, "pgdrain_escalation_unserved_channels", nil))
}
