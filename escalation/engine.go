package escalation

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Engine takes due escalation steps and delivers each at most once: record (apply_escalation with
// the step's token), then deliver, then journal. Several engines may run against one database.
type Engine struct {
	pool      *pgxpool.Pool
	notifiers map[string]Notifier
	cfg       Config
	log       *slog.Logger
}

// TickResult counts what one take did.
type TickResult struct {
	// Taken is how many steps the take leased.
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
	// Errors is how many steps hit an SQL error; they stay leased until the lease runs out.
	Errors int
}

// New returns an engine over pool that delivers each channel's steps through notifiers[channel].
func New(pool *pgxpool.Pool, notifiers map[string]Notifier, cfg Config) (*Engine, error) {
	if pool == nil {
		return nil, errors.New("pool must not be nil")
	}
	cfg = cfg.withDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	ns := make(map[string]Notifier, len(notifiers))
	for ch, n := range notifiers {
		if n == nil {
			return nil, fmt.Errorf("notifiers[%q] must not be nil", ch)
		}
		ns[ch] = n
	}
	return &Engine{pool: pool, notifiers: ns, cfg: cfg, log: cfg.Logger}, nil
}

// Run takes and delivers until ctx is cancelled, then returns nil after the step in hand is
// finished and the unapplied rest of its batch is released. A full batch is followed at once by
// the next take; otherwise the engine waits Tick.
func (e *Engine) Run(ctx context.Context) error {
	if err := e.pool.Ping(ctx); err != nil {
		return fmt.Errorf("pinging database: %w", err)
	}
	e.log.Info("escalation engine started", "batch_size", e.cfg.BatchSize, "lease", e.cfg.Lease)
	for {
		res, err := e.RunOnce(ctx)
		if ctx.Err() != nil {
			e.log.Info("escalation engine stopped", "released", res.Released)
			return nil
		}
		if err != nil {
			e.log.Error("taking due steps", "err", err)
		}
		if err == nil && res.Taken == e.cfg.BatchSize {
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

// RunOnce takes one batch of due steps and settles each of them in order. A cancelled ctx stops
// the batch between steps: the step in hand is finished, the rest is released.
func (e *Engine) RunOnce(ctx context.Context) (TickResult, error) {
	var res TickResult
	steps, err := e.take(ctx)
	if err != nil {
		return res, err
	}
	res.Taken = len(steps)
	for i, s := range steps {
		if ctx.Err() != nil {
			res.Released += e.release(steps[i:])
			break
		}
		e.settle(ctx, s, &res)
	}
	return res, nil
}

func (e *Engine) take(ctx context.Context) ([]Step, error) {
	dbctx, cancel := context.WithTimeout(ctx, e.cfg.DBTimeout)
	defer cancel()
	rows, err := e.pool.Query(dbctx, `
		SELECT t.escalation_id::text, t.alert_id::text, a.name, t.step_idx, t.channel, t.target,
		       t.lease_token::text, t.leased_until
		FROM alr.take_due_steps($1, $2) t JOIN alr.alerts a ON a.id = t.alert_id`,
		e.cfg.BatchSize, e.cfg.Lease)
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

// settle records one step and, only if the record was ours, delivers and journals it. Once the
// apply is sent, the step is finished even if ctx is cancelled: a recorded step must be delivered.
func (e *Engine) settle(ctx context.Context, s Step, res *TickResult) {
	log := e.log.With("escalation_id", s.EscalationID, "step_idx", s.StepIdx, "channel", s.Channel)
	detached := context.WithoutCancel(ctx)
	applied, err := e.apply(detached, s)
	if err != nil {
		res.Errors++
		log.Error("recording escalation step", "err", err)
		return
	}
	if !applied {
		res.NotOurs++
		log.Info("escalation step not recorded: lease retaken, ladder stopped or alert resolved; not delivering")
		return
	}
	derr := e.deliver(detached, s)
	if derr != nil {
		res.Failed++
		log.Warn("escalation step delivery failed", "target", s.Target, "err", derr)
	} else {
		res.Delivered++
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
	err := e.pool.QueryRow(ctx, `SELECT alr.apply_escalation($1::uuid, $2::uuid)`,
		s.EscalationID, s.LeaseToken).Scan(&applied)
	if err != nil {
		return false, fmt.Errorf("applying escalation: %w", err)
	}
	return applied, nil
}

func (e *Engine) deliver(ctx context.Context, s Step) error {
	n, ok := e.notifiers[s.Channel]
	if !ok {
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
	_, err := e.pool.Exec(ctx, `SELECT alr.record_delivery($1::uuid, $2, $3::uuid, $4)`,
		s.EscalationID, s.StepIdx, s.LeaseToken, errText)
	if err != nil {
		return fmt.Errorf("recording delivery: %w", err)
	}
	return nil
}

// release gives unapplied steps back so another engine takes them at once instead of after the
// lease; returns how many were still ours.
func (e *Engine) release(steps []Step) int {
	ctx, cancel := context.WithTimeout(context.Background(), e.cfg.DBTimeout)
	defer cancel()
	n := 0
	for _, s := range steps {
		var released bool
		err := e.pool.QueryRow(ctx, `SELECT alr.release_step($1::uuid, $2::uuid)`,
			s.EscalationID, s.LeaseToken).Scan(&released)
		if err != nil {
			e.log.Error("releasing escalation step", "escalation_id", s.EscalationID, "err", err)
			continue
		}
		if released {
			n++
		}
	}
	return n
}
