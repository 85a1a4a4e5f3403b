package escalation

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgdrain/pgdrain/internal/errtext"
	"github.com/pgdrain/pgdrain/internal/pgerr"
	"github.com/pgdrain/pgdrain/internal/readcommitted"
	"github.com/pgdrain/pgdrain/internal/retrylog"
	"github.com/pgdrain/pgdrain/internal/sqlrule"
	"github.com/pgdrain/pgdrain/internal/version"
)

const (
	// maxHeld bounds how many unserved steps one RunOnce takes and keeps leased while it takes
	// again; past it they are carried to the next call (see RunOnce).
	maxHeld = MaxBatchSize
	// unservedLogEvery is how often a channel's unserved steps are logged at Error; in between
	// they are logged at Debug (the metric counts every one). A configuration error is taken
	// again every Tick, and one line a second per channel would bury everything else.
	unservedLogEvery = time.Minute
)

// ApplicationName starts the application_name of the connections of an escalation engine as
// `pgdrain escalate` sets it ("pgdrain-escalate host:pid"). The console (`pgdrain web`) shows an
// engine as running while a session whose application_name starts with it is connected to the
// database (pg_stat_activity shows every role that column), so an engine run from your own program
// is seen when its pool's application_name starts with ApplicationName too.
const ApplicationName = "pgdrain-escalate"

// Engine takes due escalation steps and delivers each at most once: record (apply_escalation with
// the step's token), then deliver, then journal. Several engines may run against one database.
// A step whose channel no Notifier serves is never recorded: it is given back unapplied. A
// Notifier that panics, ends its goroutine or ignores its context costs only the step it was
// delivering (see Notifier).
type Engine struct {
	pool      *pgxpool.Pool
	db        *readcommitted.DB // pool, for the ladder's statements: READ COMMITTED whatever its default
	notifiers map[string]Notifier
	cfg       Config
	log       *slog.Logger
	metrics   *metrics

	mu             sync.Mutex
	unservedLogged map[string]time.Time // channel -> when its unserved steps were last logged at Error
	carried        []Step               // unserved steps kept leased from one runOnce to the next
	// unjournaledSeen holds the steps recorded and never journaled that the last check found
	// ("<escalation_id>/<step_idx>"), each logged once.
	unjournaledSeen map[string]bool

	health  health       // for Health
	retries retrylog.Log // which of Run's retries are logged at their level

	schemaChecked atomic.Bool  // checkSchema passed once (Run's start or the first RunOnce)
	alrMigration  atomic.Int64 // the alr schema's migration, as checkSchema read it
}

// TickResult counts what one RunOnce did.
type TickResult struct {
	// Taken is how many steps the takes leased.
	Taken int
	// Delivered is how many steps were recorded and delivered without error.
	Delivered int
	// Failed is how many steps were recorded but whose delivery failed (journaled as failed): the
	// Notifier returned an error, panicked, called runtime.Goexit, or was still running OverrunGrace
	// after StepTimeout (given up on: the outcome is unknown, the step is not delivered again).
	Failed int
	// NotOurs is how many steps apply_escalation refused: the token no longer matched (the lease
	// expired and another engine retook the step), the ladder stopped or the alert resolved.
	// Nothing was delivered for them.
	NotOurs int
	// Released is how many steps were given back unapplied because the engine was stopped.
	Released int
	// Unserved is how many steps no Notifier serves (their channel has none). They were not
	// applied — the ladder did not advance — and are given back with alr.release_step, so an
	// engine that serves the channel (or this one, once configured) delivers them: at once when
	// the takes reached the end of the due steps, otherwise at the end of a later call, or when
	// their lease runs out (see RunOnce).
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
	e := &Engine{pool: pool, db: readcommitted.New(pool), notifiers: ns, cfg: cfg, log: cfg.Logger, metrics: newMetrics(),
		unservedLogged: map[string]time.Time{}}
	if cfg.Registerer != nil {
		if err := cfg.Registerer.Register(e.metrics); err != nil {
			return nil, fmt.Errorf("registering metrics: %w", err)
		}
	}
	return e, nil
}

// Run takes and delivers until ctx is cancelled, then returns nil after the step in hand is
// finished and the unapplied rest of its batch is released: at most StepTimeout plus OverrunGrace
// after that step's delivery began, since a Notifier that ignores its context is given up on
// (Notifier). A full batch is followed at once by the next take; otherwise the engine waits Tick.
//
// At start Run checks that the database's alr schema is at migration AlrMigrationNeeded or later
// (alr.version(): an older schema, or none, is an error matching ErrSchemaTooOld that says which
// migrations to run). It then compares the channels the policies use with its notifiers (UnservedChannels) and
// logs every channel no Notifier serves at Warn; it does not fail, because an engine that refuses
// to start pages nobody, and a step of an unserved channel is never lost: it is given back
// unapplied every time it is taken (see RunOnce). Callers who prefer to fail call
// UnservedChannels themselves before Run.
//
// While the database is unavailable (restarting, failing over, a standby not yet promoted, a
// connection that does not answer within DBTimeout: see docs/failover.md) Run waits and retries
// with backoff (100ms doubling to 5s), at start too, logging at Warn with the cause. A step whose
// apply_escalation failed that way is retried while its lease lasts (a retry is safe: the token
// refuses a second record); a step whose statement may have committed before its connection died
// and whose retry is refused is logged at Error, since it is recorded but not delivered (at most
// one delivery per step). Other errors at start (authentication, a missing grant, an unmigrated
// database) are returned at once; while running they are logged at Error and retried.
func (e *Engine) Run(ctx context.Context) error {
	e.health.setState(stateStarting)
	defer e.health.setState(stateStopped)
	unserved, err := e.start(ctx)
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	e.health.setState(stateRunning)
	e.log.Info("escalation engine started", "batch_size", e.cfg.BatchSize, "lease", e.cfg.Lease,
		"channels", sortedKeys(e.notifiers))
	for _, u := range unserved {
		e.log.Warn("escalation channel has no notifier: its steps will be given back unapplied until one serves it",
			"channel", u.Channel, "policies", u.Policies, "running_ladders", u.RunningLadders)
	}
	defer func() { e.release(e.takeCarried(), outcomeUnserved) }()
	errDelay := time.Duration(0)
	var unjournaledChecked time.Time
	for {
		if time.Since(unjournaledChecked) >= unjournaledCheckEvery {
			e.checkUnjournaled(ctx)
			unjournaledChecked = time.Now()
		}
		res, full, err := e.runOnce(ctx)
		e.health.took(time.Now(), err)
		if ctx.Err() != nil {
			e.log.Info("escalation engine stopped", "released", res.Released)
			return nil
		}
		wait := e.cfg.Tick
		switch {
		case err != nil:
			errDelay = pgerr.Next(errDelay)
			wait = errDelay
			if pgerr.ReadOnly(err) {
				// A session keeps the default_transaction_read_only it began with: without new
				// sessions a DBA's RESET went unseen until the pool retired them (an hour by default).
				e.pool.Reset()
			}
			e.logRetry("taking due steps failed; retrying", err, wait)
		case full:
			errDelay = 0
			e.retries.Reset()
			continue
		default:
			errDelay = 0
			e.retries.Reset()
		}
		select {
		case <-ctx.Done():
			e.log.Info("escalation engine stopped")
			return nil
		case <-time.After(wait):
		}
	}
}

// start pings the database, checks the alr schema's version (checkSchema) and lists the channels
// the policies use (UnservedChannels), each
// attempt bounded by DBTimeout, waiting with backoff while the database is unavailable (a restart,
// a failover, a standby not yet promoted): an engine started during a failover waits for the new
// primary. Any other error (authentication, a missing grant, an unmigrated database) is returned
// at once; so is the last one when ctx ends.
func (e *Engine) start(ctx context.Context) ([]ChannelUse, error) {
	delay := pgerr.BackoffMin
	for {
		pctx, cancel := context.WithTimeout(ctx, e.cfg.DBTimeout)
		err := e.pool.Ping(pctx)
		cancel()
		var unserved []ChannelUse
		if err != nil {
			err = fmt.Errorf("pinging database: %w", err)
		} else if err = e.checkSchema(ctx); err == nil {
			if unserved, err = e.UnservedChannels(ctx); err == nil {
				return unserved, nil
			}
		}
		if ctx.Err() != nil || pgerr.Passing(err) == "" {
			return nil, err
		}
		e.logRetry("starting the escalation engine failed; retrying", err, delay)
		select {
		case <-ctx.Done():
			return nil, err
		case <-time.After(delay):
		}
		delay = pgerr.Next(delay)
	}
}

// checkSchema refuses an alr schema older than AlrMigrationNeeded (alr.version()): an error matching
// ErrSchemaTooOld that says which migrations to run. It is not "unavailable", so start returns it at once.
// Once it has passed it is not asked again.
func (e *Engine) checkSchema(ctx context.Context) error {
	if e.schemaChecked.Load() {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, e.cfg.DBTimeout)
	defer cancel()
	schema, err := version.CheckSchema(ctx, e.pool, "alr", AlrMigrationNeeded, "this escalation engine")
	if err != nil {
		return err
	}
	if schema.LacksSecurityFix() {
		e.log.Warn(schema.SecurityAdvice())
	}
	e.alrMigration.Store(int64(schema.Migration))
	level, err := e.db.Check(ctx)
	if err != nil {
		return err
	}
	if e.db.Explicit() {
		e.log.Info("the pool's connections begin transactions in "+level+
			" (default_transaction_isolation): the engine runs each statement in a READ COMMITTED transaction of its own,"+
			" two more round trips each; set default_transaction_isolation = 'read committed' for the engine's role to save them",
			"default_transaction_isolation", level)
	}
	e.schemaChecked.Store(true)
	return nil
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
// in between) and counted (TickResult.Unserved, pgdrain_escalation_unserved_steps_total{channel}).
//
// Unserved steps never starve the others, however many are due: they keep their next_at, so a take
// that finds them free returns them first, and take_due_steps passes over a step only while it is
// leased. So a full take that contained unserved steps keeps them leased and takes again. Once
// a take is not full (every due step was taken) all of them are given back, in one round trip,
// before its served steps are delivered. A RunOnce that took MaxBatchSize of them, or whose last
// take was full of served steps, returns and carries the ones it holds to the next call (Run makes
// it at once), so the next takes go past them; Run gives back the carried ones when it stops.
// Meanwhile an engine that serves their channel gets them when this one gives them back, and at
// the latest when their lease runs out, as after a crash.
//
// Until the check has passed once (in Run or an earlier RunOnce), RunOnce checks the alr schema as
// Run does: an older schema, or none, is an error matching ErrSchemaTooOld, returned before
// anything is taken.
func (e *Engine) RunOnce(ctx context.Context) (TickResult, error) {
	if err := e.checkSchema(ctx); err != nil {
		return TickResult{}, err
	}
	res, _, err := e.runOnce(ctx)
	return res, err
}

// runOnce is RunOnce; full reports that Run should take again at once: the last take was full.
func (e *Engine) runOnce(ctx context.Context) (res TickResult, full bool, err error) {
	held := e.takeCarried() // unserved steps kept leased so that the takes go past them
	heldHere := 0           // how many of them this call took
	carry := false
	defer func() {
		if carry {
			e.carry(held)
		} else {
			e.release(held, outcomeUnserved)
		}
	}()
	for {
		steps, err := e.take(ctx)
		if err != nil {
			return res, false, err
		}
		// Healthy again from here: the deliveries that follow may take StepTimeout each, and the
		// last take's error (Health) is over.
		e.health.took(time.Now(), nil)
		res.Taken += len(steps)
		full := len(steps) == e.cfg.BatchSize
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
		held = append(held, unserved...)
		heldHere += len(unserved)
		if !full {
			// Every due step was taken: give the held ones back before delivering, since another
			// engine may serve them.
			e.release(held, outcomeUnserved)
			held = nil
		}
		for i, s := range serve {
			if ctx.Err() != nil {
				res.Released += e.release(serve[i:], outcomeReleased)
				break
			}
			e.settle(ctx, s, &res)
		}
		switch {
		case ctx.Err() != nil || !full:
			return res, false, nil
		case len(unserved) == 0 || heldHere >= maxHeld:
			carry = true
			return res, true, nil
		}
	}
}

// takeCarried returns the unserved steps an earlier runOnce kept leased (see RunOnce), less those
// whose lease has run out, and forgets them.
func (e *Engine) takeCarried() []Step {
	e.mu.Lock()
	defer e.mu.Unlock()
	now := time.Now()
	var live []Step
	for _, s := range e.carried {
		if s.LeasedUntil.After(now) {
			live = append(live, s)
		}
	}
	e.carried = nil
	return live
}

// carry keeps unserved steps leased for the next runOnce.
func (e *Engine) carry(steps []Step) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.carried = append(e.carried, steps...)
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
	rows, err := e.db.Query(dbctx, sqlTake, e.cfg.BatchSize, e.cfg.Lease)
	if err != nil {
		return nil, fmt.Errorf("taking due steps: %w", err)
	}
	steps, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Step, error) {
		var s Step
		var leasedUntil int64
		err := r.Scan(&s.EscalationID, &s.AlertID, &s.AlertName, &s.StepIdx, &s.Channel, &s.Target,
			&s.LeaseToken, &leasedUntil)
		s.LeasedUntil = time.UnixMicro(leasedUntil)
		return s, err
	})
	if err != nil {
		return nil, fmt.Errorf("taking due steps: %w", err)
	}
	return steps, nil
}

// settle records one step and, only if the record was ours, delivers and journals it. The caller
// has checked that a Notifier serves the step's channel. Once the apply is sent, the step is
// finished even if ctx is cancelled: a recorded step must be delivered. A Notifier that panics,
// ends its goroutine or ignores its context costs only this step (deliver): it is journaled as a
// failed delivery, and settle returns at most StepTimeout plus OverrunGrace after delivering began.
func (e *Engine) settle(ctx context.Context, s Step, res *TickResult) {
	log := e.log.With("escalation_id", s.EscalationID, "step_idx", s.StepIdx, "channel", s.Channel)
	detached := context.WithoutCancel(ctx)
	applied, uncertain, err := e.applyRetrying(ctx, log, s)
	if err != nil {
		res.Errors++
		e.metrics.steps.WithLabelValues(outcomeError).Inc()
		e.logStepError(log, "recording escalation step failed; the step is taken again when its lease ends", err)
		return
	}
	if !applied {
		res.NotOurs++
		e.metrics.steps.WithLabelValues(outcomeNotOurs).Inc()
		if uncertain {
			// The first apply_escalation may have committed before its connection died: then the
			// retry found its own token gone, and the step is recorded but never delivered.
			log.Error("escalation step may be recorded without delivery: the connection died after apply_escalation "+
				"was sent and the retry was refused (at most one delivery per step: a commit whose answer was lost is not delivered)",
				"target", s.Target)
			return
		}
		log.Info("escalation step not recorded: lease retaken, ladder stopped or alert resolved; not delivering")
		return
	}
	d := e.deliver(detached, log, s)
	if d.failed {
		res.Failed++
		e.metrics.steps.WithLabelValues(outcomeFailed).Inc()
		log.Warn("escalation step delivery failed", "target", s.Target, "err", errtext.Recordable(d.text, errtext.LogBytes))
	} else {
		res.Delivered++
		e.metrics.steps.WithLabelValues(outcomeDelivered).Inc()
		log.Info("escalation step delivered", "target", s.Target)
	}
	if err := e.journalRetrying(ctx, log, s, d); err != nil {
		e.logStepError(log, "journaling escalation step delivery failed; the step was delivered, its journal row is missing", err)
	}
}

// applyRetrying records s (apply_escalation), retrying with backoff while the failure passes (the
// database unavailable, a lock_timeout, ...: retryStep), the step's lease has time and Run's ctx lives. A retry is safe: the token is
// cleared by a successful apply, so a repeated one returns false. uncertain reports that an attempt
// failed after its statement may have reached the server and that alr.recorded_by could not say the
// step was ours (then a false from a retry may still be this engine's own lost commit).
func (e *Engine) applyRetrying(ctx context.Context, log *slog.Logger, s Step) (applied, uncertain bool, err error) {
	delay := time.Duration(0)
	for {
		applied, err = e.apply(context.WithoutCancel(ctx), s)
		if err == nil || !e.retryStep(ctx, log, s.LeasedUntil, "recording escalation step", err, &delay) {
			break
		}
		uncertain = uncertain || !sentNothing(err)
	}
	if err != nil || applied || !uncertain {
		return applied, uncertain, err
	}
	// The retry was refused after an attempt that may have committed (its answer lost: the
	// connection died, a synchronous standby held the commit past DBTimeout). If it did, our token
	// recorded this step (alr.recorded_by, alr 00012), and the step is ours to deliver, once.
	if e.alrMigration.Load() < recordedByMigration {
		return false, true, nil
	}
	idx, err := e.recordedBy(context.WithoutCancel(ctx), s)
	if err != nil {
		log.Warn("asking which step our token recorded failed; not delivering", "err", err)
		return false, true, nil
	}
	if idx != nil && *idx == s.StepIdx {
		log.Warn("apply_escalation committed but its answer was lost; the retry found the step recorded by our token: delivering it")
		return true, false, nil
	}
	return false, true, nil
}

// recordedByMigration is the alr migration that added alr.recorded_by: with an older schema an
// engine can not tell its own lost commit, and such a step stays recorded and undelivered.
const recordedByMigration = 12

// recordedBy is the step index s's token recorded (alr.recorded_by), nil when none (or the alert
// no longer fires, or someone stopped the ladder).
func (e *Engine) recordedBy(ctx context.Context, s Step) (*int, error) {
	ctx, cancel := context.WithTimeout(ctx, e.cfg.DBTimeout)
	defer cancel()
	var idx *int
	if err := e.db.QueryRow(ctx, sqlRecordedBy, s.EscalationID, s.LeaseToken).Scan(&idx); err != nil {
		return nil, fmt.Errorf("asking which step the token recorded: %w", err)
	}
	return idx, nil
}

// journalRetrying journals the delivery of s, retrying like applyRetrying: the journal is fenced by
// the token that recorded the step (alr 00010), which it takes once, so a repeat of an insert whose
// commit happened is refused and leaves one journal row per delivery. A refusal of the first
// attempt (a step recorded before the upgrade, whose token was not kept) is logged.
//
// The retries are not bounded by the step's lease: once apply_escalation recorded the step, the
// lease is over (its token was cleared) and only this engine's token can journal it, however late.
// A batch slower than its lease (a hanging channel, the seed's ordinary evening) delivers its last
// steps after their lease ended, and bounded by it a single failed attempt was the end: the
// delivery had no journal row, and alr.unjournaled_steps then reported a page that had been sent
// as "probably never delivered; page its target by hand". They get as long as an apply had, a
// Lease, from when the delivery ended (the engine's unjournaled bound counts this twice over).
func (e *Engine) journalRetrying(ctx context.Context, log *slog.Logger, s Step, d delivery) error {
	delay := time.Duration(0)
	until := time.Now().Add(e.cfg.Lease)
	if s.LeasedUntil.After(until) {
		until = s.LeasedUntil
	}
	for attempt := 1; ; attempt++ {
		journaled, err := e.journal(context.WithoutCancel(ctx), s, d)
		if err == nil {
			if !journaled && attempt == 1 {
				log.Warn("the journal refused the step's token (a step recorded before alr migration 00010?): no journal row for this delivery")
			}
			return nil
		}
		if !e.retryStep(ctx, log, until, "journaling escalation step delivery", err, &delay) {
			return err
		}
	}
}

// retryStep decides whether a failed statement about a step is tried again, and if so sleeps the
// next backoff: only while the failure is one that passes (the database unavailable, a deadlock or
// serialization failure, the server's lock_timeout or statement_timeout: pgerr.Passing, what the
// drainer retries its results on), Run's ctx lives and the retry starts before until (the step's
// lease for its record, later for its journal: journalRetrying). Both statements are fenced by the
// step's token, and one the server refused changed nothing, so a retry is safe. Before, only an
// unavailable database was retried: a role's lock_timeout (a DBA's setting for every application
// role) that ended a journal waiting on the ladder's row lost the delivery its journal row.
func (e *Engine) retryStep(ctx context.Context, log *slog.Logger, until time.Time, doing string, err error, delay *time.Duration) bool {
	cause := pgerr.Passing(err)
	*delay = pgerr.Next(*delay)
	if cause == "" || ctx.Err() != nil || time.Now().Add(*delay).After(until) {
		return false
	}
	// A serialization failure says the connections now begin in another level: the retry runs in
	// READ COMMITTED.
	e.recheckIsolation(err)
	msg := doing + " failed; retrying"
	if pgerr.Unavailable(err) != "" {
		msg = doing + " failed (database unavailable); retrying"
	}
	log.Warn(msg, "err", err, "cause", cause, "retry_in", *delay, "retrying_until", until)
	select {
	case <-ctx.Done():
		return false
	case <-time.After(*delay):
		return true
	}
}

// sentNothing tells whether a failed statement certainly did not run: the server answered with an
// error (a *pgconn.PgError: the statement's transaction rolled back) or nothing was sent.
func sentNothing(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) || pgconn.SafeToRetry(err)
}

// logRetry logs a failed database call that Run retries after retryIn: at Warn with its cause when
// the database is unavailable (internal/pgerr, as the drainer), otherwise at Error. A line that
// repeats is logged so the first three times, then once a minute with the retries since
// (quieted_retries), which are logged at Debug (internal/retrylog).
func (e *Engine) logRetry(msg string, err error, retryIn time.Duration) {
	e.recheckIsolation(err)
	level, attrs := slog.LevelError, []any{"err", err}
	if cause := pgerr.Unavailable(err); cause != "" {
		level, msg, attrs = slog.LevelWarn, msg+" (database unavailable)", append(attrs, "cause", cause)
	} else if cause := pgerr.Passing(err); cause != "" {
		level, msg, attrs = slog.LevelWarn, msg+" (retrying)", append(attrs, "cause", cause)
	}
	attrs = append(attrs, "retry_in", retryIn)
	loud, quieted := e.retries.Admit(msg+" "+pgerr.Code(err), time.Now())
	if !loud {
		level = slog.LevelDebug
	} else if quieted > 0 {
		attrs = append(attrs, "quieted_retries", quieted)
	}
	e.log.Log(context.Background(), level, msg, attrs...)
}

// recheckIsolation switches the engine's statements to READ COMMITTED transactions of their own
// after a serialization failure that says a connection began in another level (readcommitted.Recheck).
func (e *Engine) recheckIsolation(err error) {
	if e.db.Recheck(err) {
		e.log.Info("a statement failed with a serialization failure: the pool's connections now begin in another level than " +
			"READ COMMITTED (default_transaction_isolation changed); the engine runs each statement in a READ COMMITTED " +
			"transaction of its own from now on")
	}
}

// logStepError logs a step's failed statement that is not retried any more: at Warn with its cause
// when the database is unavailable, otherwise at Error.
func (e *Engine) logStepError(log *slog.Logger, msg string, err error) {
	e.recheckIsolation(err)
	if cause := pgerr.Unavailable(err); cause != "" {
		log.Warn(msg+" (database unavailable)", "err", err, "cause", cause)
		return
	}
	log.Error(msg, "err", err)
}

func (e *Engine) apply(ctx context.Context, s Step) (bool, error) {
	ctx, cancel := context.WithTimeout(ctx, e.cfg.DBTimeout)
	defer cancel()
	var applied bool
	if err := e.db.QueryRow(ctx, sqlApply, s.EscalationID, s.LeaseToken).Scan(&applied); err != nil {
		return false, fmt.Errorf("applying escalation: %w", err)
	}
	return applied, nil
}

// journal records delivery d of s (alr.record_delivery): error NULL when delivered, otherwise
// d's text, already made recordable by deliver (a channel's error may carry anything its peer said;
// a text PostgreSQL refuses would cost the delivery its journal row), or a reason of its own when
// that text shows nothing (record_delivery refuses a blank one). false when the journal refused
// the token (NULL: it journaled this step already, or never kept its token).
func (e *Engine) journal(ctx context.Context, s Step, d delivery) (bool, error) {
	ctx, cancel := context.WithTimeout(ctx, e.cfg.DBTimeout)
	defer cancel()
	var errText *string
	if d.failed {
		text := d.text
		if sqlrule.Blank(text) {
			text = "the notifier failed without saying why (its error has no text)"
		}
		errText = &text
	}
	var id *int64
	if err := e.db.QueryRow(ctx, sqlRecordDelivery, s.EscalationID, s.StepIdx, s.LeaseToken, errText).Scan(&id); err != nil {
		return false, fmt.Errorf("recording delivery: %w", err)
	}
	return id != nil, nil
}

// release gives unapplied steps back so another engine takes them at once instead of after the
// lease; returns how many were still ours. outcome is what they are counted as: released (the
// engine is stopping) or unserved (already counted by reportUnserved). All of them go in one round
// trip, a pipeline ending in one Sync and so one implicit transaction: when the server refuses one
// (its ladder was deleted), none is released, and they are given back one at a time instead.
func (e *Engine) release(steps []Step, outcome string) int {
	if len(steps) == 0 {
		return 0
	}
	n, err := e.releaseBatch(steps)
	if err != nil {
		var pgErr *pgconn.PgError
		if !errors.As(err, &pgErr) {
			e.logStepError(e.log.With("steps", len(steps), "first_escalation_id", steps[0].EscalationID),
				"releasing escalation steps failed; they are taken again when their lease ends", err)
			return 0
		}
		n = 0
		for _, s := range steps {
			var released bool
			ctx, cancel := context.WithTimeout(context.Background(), e.cfg.DBTimeout)
			err := e.db.QueryRow(ctx, sqlRelease, s.EscalationID, s.LeaseToken).Scan(&released)
			cancel()
			if err != nil {
				e.logStepError(e.log.With("escalation_id", s.EscalationID), "releasing escalation step failed; it is taken again when its lease ends", err)
				continue
			}
			if released {
				n++
			}
		}
	}
	if outcome == outcomeReleased {
		e.metrics.steps.WithLabelValues(outcomeReleased).Add(float64(n))
	}
	return n
}

// releaseBatch releases steps in one round trip (see release); on an error nothing was released.
func (e *Engine) releaseBatch(steps []Step) (int, error) {
	ctx, cancel := context.WithTimeout(context.Background(), e.cfg.DBTimeout)
	defer cancel()
	b := &pgx.Batch{}
	for _, s := range steps {
		b.Queue(sqlRelease, s.EscalationID, s.LeaseToken)
	}
	results := e.db.SendBatch(ctx, b)
	n := 0
	var err error
	for range steps {
		var released bool
		if err = results.QueryRow().Scan(&released); err != nil {
			break
		}
		if released {
			n++
		}
	}
	if cerr := results.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return 0, fmt.Errorf("releasing escalation steps: %w", err)
	}
	return n, nil
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
