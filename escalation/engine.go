package escalation

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

const (
	// maxHeld bounds how many unserved steps one RunOnce keeps leased while it takes again (see
	// RunOnce).
	maxHeld = MaxBatchSize
	// unservedLogEvery is how often a channel's unserved steps are logged at Error; in between
	// they are logged at Debug (the metric counts every one). A configuration error is taken
	// again every Tick, and one line a second per channel would bury everything else.
	unservedLogEvery = time.Minute
)

// Engine takes due escalation steps and delivers each at most once: record (apply_escalation with
// the step's token), then deliver, then journal. Several engines may run against one database.
// A step whose channel no Notifier serves is never recorded: it is given back unapplied.
type Engine struct {
	pool      *pgxpool.Pool
	notifiers map[string]Notifier
	cfg       Config
	log       *slog.Logger
	metrics   *metrics

	mu             sync.Mutex
	unservedLogged map[string]time.Time // channel -> when its unserved steps were last logged at Error
}

// TickResult counts what one RunOnce did.
type TickResult struct {
	// Taken is how many steps the takes leased.
	Taken int
	// Delivered is how many steps were recorded and delivered without error.
	Delivered int
	// Failed is how many steps were recorded but whose delivery failed (journaled as failed).
	Failed int
	// NotOurs is how many steps apply_escalation refused: the token no longer matched (the lease
	// expired and another engine retook the step), the ladder stopped or the alert resolved.
	// Nothing was delivered for them.
	NotOurs int
	// Released is how many steps were given back unapplied because the engine was stopped.
	Released int
	// Unserved is how many steps no Notifier serves (their channel has none). They were not
	// applied — the ladder did not advance — and were given back with alr.release_step, so an
	// engine that serves the channel (or this one, once configured) delivers them.
	Unserved int
	// Errors is how many steps hit an SQL error; they stay leased until the lease runs out.
	Errors int
}

// ChannelUse is a channel the escalation policies use (alr.channels_in_use).
type ChannelUse struct {
	// Channel is the channel's name, as in the policies' steps.
	Channel string
	// Policies is how many policies have a step on it.
	Policies int64
	// RunningLadders is how many running ladders still have a step on it (current or later).
	RunningLadders int64
}

// New returns an engine over pool that delivers each channel's steps through notifiers[channel].
// It validates cfg (reporting every problem) and the notifiers, and registers the metrics with
// cfg.Registerer when set; it does not touch the database.
func New(pool *pgxpool.Pool, notifiers map[string]Notifier, cfg Config) (*Engine, error) {
	var errs []error
	if pool == nil {
		errs = append(errs, errors.New("pool must not be nil"))
	}
	if err := cfg.Validate(); err != nil {
		errs = append(errs, err)
	}
	ns := make(map[string]Notifier, len(notifiers))
	for _, ch := range sortedKeys(notifiers) {
		switch {
		case ch == "":
			errs = append(errs, errors.New("notifiers must not have an empty channel name"))
		case notifiers[ch] == nil:
			errs = append(errs, fmt.Errorf("notifiers[%q] must not be nil", ch))
		default:
			ns[ch] = notifiers[ch]
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	e := &Engine{pool: pool, notifiers: ns, cfg: cfg, log: cfg.Logger, metrics: newMetrics(),
		unservedLogged: map[string]time.Time{}}
	if cfg.Registerer != nil {
		if err := cfg.Registerer.Register(e.metrics); err != nil {
			return nil, fmt.Errorf("registering metrics: %w", err)
		}
	}
	return e, nil
}

// Run takes and delivers until ctx is cancelled, then returns nil after the step in hand is
// finished and the unapplied rest of its batch is released. A full batch is followed at once by
// the next take; otherwise the engine waits Tick.
//
// At start Run compares the channels the policies use with its notifiers (UnservedChannels) and
// logs every channel no Notifier serves at Warn; it does not fail, because an engine that refuses
// to start pages nobody, and a step of an unserved channel is never lost: it is given back
// unapplied every time it is taken (see RunOnce). Callers who prefer to fail call
// UnservedChannels themselves before Run.
func (e *Engine) Run(ctx context.Context) error {
	if err := e.pool.Ping(ctx); err != nil {
		return fmt.Errorf("pinging database: %w", err)
	}
	e.log.Info("escalation engine started", "batch_size", e.cfg.BatchSize, "lease", e.cfg.Lease,
		"channels", sortedKeys(e.notifiers))
	if unserved, err := e.UnservedChannels(ctx); err != nil {
		e.log.Error("checking the channels of the escalation policies", "err", err)
	} else {
		for _, u := range unserved {
			e.log.Warn("escalation channel has no notifier: its steps will be given back unapplied until one serves it",
				"channel", u.Channel, "policies", u.Policies, "running_ladders", u.RunningLadders)
		}
	}
	for {
		res, full, err := e.runOnce(ctx)
		if ctx.Err() != nil {
			e.log.Info("escalation engine stopped", "released", res.Released)
			return nil
		}
		if err != nil {
			e.log.Error("taking due steps", "err", err)
		}
		if err == nil && full {
			continue
		}
		select {
		case <-ctx.Done():
			e.log.Info("escalation engine stopped")
			return nil
		case <-time.After(e.cfg.Tick):
		}
	}
}

// UnservedChannels returns the channels some policy uses that no Notifier of e serves, sorted by
// name (alr.channels_in_use), and sets the gauge pgdrain_escalation_unserved_channels.
func (e *Engine) UnservedChannels(ctx context.Context) ([]ChannelUse, error) {
	ctx, cancel := context.WithTimeout(ctx, e.cfg.DBTimeout)
	defer cancel()
	rows, err := e.pool.Query(ctx, sqlChannelsInUse)
	if err != nil {
		return nil, fmt.Errorf("listing channels in use: %w", err)
	}
	uses, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (ChannelUse, error) {
		var u ChannelUse
		err := r.Scan(&u.Channel, &u.Policies, &u.RunningLadders)
		return u, err
	})
	if err != nil {
		return nil, fmt.Errorf("listing channels in use: %w", err)
	}
	var unserved []ChannelUse
	for _, u := range uses {
		if _, ok := e.notifiers[u.Channel]; !ok {
			unserved = append(unserved, u)
		}
	}
	e.metrics.unservedChannels.Set(float64(len(unserved)))
	return unserved, nil
}

// RunOnce takes one batch of due steps and settles each of them in order. A cancelled ctx stops
// the batch between steps: the step in hand is finished, the rest is released.
//
// Steps are checked before anything is recorded: a step whose channel no Notifier serves is not
// applied (the ladder does not advance, nothing is lost), it is given back with alr.release_step,
// logged with its channel (at Error the first time and at most once a minute per channel, at Debug
// in between) and counted (TickResult.Unserved, pgdrain_escalation_unserved_steps_total{channel}). So that such steps can not starve the others
// (they keep their next_at, so every take would return them first), a full take that contained
// unserved steps keeps them leased and takes again, up to MaxBatchSize held steps; they are
// given back when RunOnce returns.
func (e *Engine) RunOnce(ctx context.Context) (TickResult, error) {
	res, _, err := e.runOnce(ctx)
	return res, err
}

// runOnce is RunOnce; full reports whether the last take was full of steps this engine serves, so
// that Run takes again at once.
func (e *Engine) runOnce(ctx context.Context) (res TickResult, full bool, err error) {
	var held []Step // unserved steps kept leased while this call takes again
	defer func() { e.release(held, outcomeUnserved) }()
	for {
		steps, err := e.take(ctx)
		if err != nil {
			return res, false, err
		}
		res.Taken += len(steps)
		var serve, unserved []Step
		for _, s := range steps {
			if _, ok := e.notifiers[s.Channel]; ok {
				serve = append(serve, s)
			} else {
				unserved = append(unserved, s)
			}
		}
		res.Unserved += len(unserved)
		e.reportUnserved(unserved)
		again := len(steps) == e.cfg.BatchSize && len(unserved) > 0 && len(held)+len(unserved) <= maxHeld
		if again {
			held = append(held, unserved...)
		} else {
			e.release(unserved, outcomeUnserved) // before delivering: another engine may serve them
		}
		for i, s := range serve {
			if ctx.Err() != nil {
				res.Released += e.release(serve[i:], outcomeReleased)
				break
			}
			e.settle(ctx, s, &res)
		}
		if !again || ctx.Err() != nil {
			return res, len(steps) == e.cfg.BatchSize && len(unserved) == 0, nil
		}
	}
}

// reportUnserved counts steps no Notifier serves and logs them, one line per channel: at Error the
// first time and then at most once per unservedLogEvery, at Debug in between.
func (e *Engine) reportUnserved(steps []Step) {
	if len(steps) == 0 {
		return
	}
	byChannel := map[string][]string{}
	for _, s := range steps {
		byChannel[s.Channel] = append(byChannel[s.Channel], s.IdempotencyKey())
		e.metrics.unservedSteps.WithLabelValues(s.Channel).Inc()
		e.metrics.steps.WithLabelValues(outcomeUnserved).Inc()
	}
	now := time.Now()
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, ch := range sortedKeys(byChannel) {
		level := slog.LevelDebug
		if last, ok := e.unservedLogged[ch]; !ok || now.Sub(last) >= unservedLogEvery {
			level = slog.LevelError
			e.unservedLogged[ch] = now
		}
		e.log.Log(context.Background(), level, "escalation steps not applied: no notifier serves their channel; given back, the ladder waits",
			"channel", ch, "steps", len(byChannel[ch]), "first_step", byChannel[ch][0],
			"err", fmt.Errorf("%w %q", ErrNoNotifier, ch))
	}
}

func (e *Engine) take(ctx context.Context) ([]Step, error) {
	dbctx, cancel := context.WithTimeout(ctx, e.cfg.DBTimeout)
	defer cancel()
	rows, err := e.pool.Query(dbctx, sqlTake, e.cfg.BatchSize, e.cfg.Lease)
	if err != nil {
		return nil, fmt.Errorf("taking due steps: %w", err)
	}
	steps, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Step, error) {
		var s Step
		err := r.Scan(&s.EscalationID, &s.AlertID, &s.AlertName, &s.StepIdx, &s.Channel, &s.Target,
			&s.LeaseToken, &s.LeasedUntil)
		return s, err
	})
	if err != nil {
		return nil, fmt.Errorf("taking due steps: %w", err)
	}
	return steps, nil
}

// settle records one step and, only if the record was ours, delivers and journals it. The caller
// has checked that a Notifier serves the step's channel. Once the apply is sent, the step is
// finished even if ctx is cancelled: a recorded step must be delivered.
func (e *Engine) settle(ctx context.Context, s Step, res *TickResult) {
	log := e.log.With("escalation_id", s.EscalationID, "step_idx", s.StepIdx, "channel", s.Channel)
	detached := context.WithoutCancel(ctx)
	applied, err := e.apply(detached, s)
	if err != nil {
		res.Errors++
		e.metrics.steps.WithLabelValues(outcomeError).Inc()
		log.Error("recording escalation step", "err", err)
		return
	}
	if !applied {
		res.NotOurs++
		e.metrics.steps.WithLabelValues(outcomeNotOurs).Inc()
		log.Info("escalation step not recorded: lease retaken, ladder stopped or alert resolved; not delivering")
		return
	}
	derr := e.deliver(detached, s)
	if derr != nil {
		res.Failed++
		e.metrics.steps.WithLabelValues(outcomeFailed).Inc()
		log.Warn("escalation step delivery failed", "target", s.Target, "err", derr)
	} else {
		res.Delivered++
		e.metrics.steps.WithLabelValues(outcomeDelivered).Inc()
		log.Info("escalation step delivered", "target", s.Target)
	}
	if err := e.journal(detached, s, derr); err != nil {
		log.Error("journaling escalation step delivery", "err", err)
	}
}

func (e *Engine) apply(ctx context.Context, s Step) (bool, error) {
	ctx, cancel := context.WithTimeout(ctx, e.cfg.DBTimeout)
	defer cancel()
	var applied bool
	if err := e.pool.QueryRow(ctx, sqlApply, s.EscalationID, s.LeaseToken).Scan(&applied); err != nil {
		return false, fmt.Errorf("applying escalation: %w", err)
	}
	return applied, nil
}

func (e *Engine) deliver(ctx context.Context, s Step) error {
	n, ok := e.notifiers[s.Channel]
	if !ok { // checked before apply; kept so a future caller can not deliver to nil
		return fmt.Errorf("%w %q", ErrNoNotifier, s.Channel)
	}
	ctx, cancel := context.WithTimeout(ctx, e.cfg.StepTimeout)
	defer cancel()
	return n.Notify(ctx, s)
}

func (e *Engine) journal(ctx context.Context, s Step, deliveryErr error) error {
	ctx, cancel := context.WithTimeout(ctx, e.cfg.DBTimeout)
	defer cancel()
	var errText *string
	if deliveryErr != nil {
		t := deliveryErr.Error()
		errText = &t
	}
	if _, err := e.pool.Exec(ctx, sqlRecordDelivery, s.EscalationID, s.StepIdx, s.LeaseToken, errText); err != nil {
		return fmt.Errorf("recording delivery: %w", err)
	}
	return nil
}

// release gives unapplied steps back so another engine takes them at once instead of after the
// lease; returns how many were still ours. outcome is what they are counted as: released (the
// engine is stopping) or unserved (already counted by reportUnserved).
func (e *Engine) release(steps []Step, outcome string) int {
	if len(steps) == 0 {
		return 0
	}
	ctx, cancel := context.WithTimeout(context.Background(), e.cfg.DBTimeout)
	defer cancel()
	n := 0
	for _, s := range steps {
		var released bool
		if err := e.pool.QueryRow(ctx, sqlRelease, s.EscalationID, s.LeaseToken).Scan(&released); err != nil {
			e.log.Error("releasing escalation step", "escalation_id", s.EscalationID, "err", err)
			continue
		}
		if released {
			n++
		}
	}
	if outcome == outcomeReleased {
		e.metrics.steps.WithLabelValues(outcomeReleased).Add(float64(n))
	}
	return n
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
