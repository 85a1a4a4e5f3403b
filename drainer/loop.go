package drainer

import (
	"context"
	"time"

	"github.com/pgdrain/pgdrain/internal/pgerr"
)

const (
	// minWakeDelay keeps a wake-up scheduled for "now" from turning into a busy loop.
	minWakeDelay = 100 * time.Millisecond
	// errorDelayMin and errorDelayMax bound the pause after a failed claim (database down).
	errorDelayMin = pgerr.BackoffMin
	errorDelayMax = pgerr.BackoffMax
	// recordTimeout bounds how long the recorder keeps retrying results after Run's ctx ended
	// (each attempt, like a release, is bounded by ClaimTimeout).
	recordTimeout = 10 * time.Second
)

// runner is one Run: the resolved config, the registration and the wake-up channel.
type runner[T any] struct {
	d       *Drainer[T]
	cfg     Config // defaults applied
	reg     registration
	wake    chan struct{}
	runCtx  context.Context // Run's ctx
	metrics *metrics        // this Run's handle on its queue's series
	waiting waiting         // whether producers know this drainer waits for a NOTIFY (waiting.go)
	sub     *subscription   // its LISTEN (nil with PollOnly); follows the registration's channel
	// lastFound is when a claim last found rows: the drainer busy-polls for BusyPoll after it.
	lastFound time.Time
	trickle   trickle  // paces claims while rows trickle in (trickle.go)
	timedOut  timedOut // rows of TxApplier calls that ran out of their time (txtimedout.go)
}

// bounded returns ctx bounded by ClaimTimeout, for one short database call: a connection that
// stopped answering (a host gone without a reset) is abandoned after that long and pgx closes it.
func (r *runner[T]) bounded(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, r.cfg.ClaimTimeout)
}

// signal asks the claimer to claim now (a NOTIFY arrived, LISTEN reconnected, results were
// recorded, a repair fixed something). It never blocks.
func (r *runner[T]) signal() {
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// drain runs the configured mode until ctx ends (nil), or until a call meets the pool closed under
// Run (an error matching ErrPoolClosed, see poolClosed).
func (r *runner[T]) drain(ctx context.Context) error {
	if r.cfg.ClaimMode == ClaimLock {
		return r.lockLoop(ctx)
	}
	return newPipeline(r).run(ctx)
}

// lockLoop claims lock-mode batches until ctx ends: after any batch that found rows (at once after
// a full one, else paced by Config.TrickleInterval), otherwise on a wake-up, at the earliest
// backoff or lease end in the queue, or after PollFallback. It returns nil when ctx ends, and
// Run's error when the pool was closed under it (Close waits for the connection a batch holds: the
// calls after the batch meet the pool closed).
func (r *runner[T]) lockLoop(ctx context.Context) error {
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	errDelay := errorDelayMin
	for {
		if ctx.Err() != nil {
			return nil
		}
		if r.d.txApply == nil && r.freeSlots() <= 0 {
			// Every apply slot is held by an apply that an earlier batch gave up on (it ignores its
			// context): claim when one returns, not rows that nothing could apply.
			select {
			case <-ctx.Done():
				return nil
			case <-r.d.inflight.freed:
			}
			continue
		}
		for d := r.paced(ctx); d > 0; d = r.paced(ctx) {
			timer.Reset(d)
			select {
			case <-ctx.Done():
				return nil
			case <-timer.C:
			}
		}
		// A NOTIFY heard while busy (batches that find rows go on at once, never through the wait
		// below) clears the mark now: left until the drainer next waited, it had every producer
		// commit NOTIFY, each queued on NOTIFY's lock (three lock-mode drainers at 400 commits/s:
		// a NOTIFY for every second commit; the lease pipeline clears it as it goes).
		if r.waiting.heard.Load() {
			r.woke(ctx)
		}
		batch := r.lockBatch
		if r.d.txApply != nil {
			batch = r.txBatch
		}
		start := time.Now()
		n, err := batch(ctx)
		r.took(ctx, start, true, err)
		if ctx.Err() != nil {
			return nil
		}
		var wait time.Duration
		switch {
		case err != nil:
			if closed := poolClosed(err); closed != nil {
				return closed
			}
			r.d.logRetry(ctx, "draining batch failed; retrying", err, errDelay)
			if !r.backOff(ctx, errDelay) {
				return nil
			}
			errDelay = min(2*errDelay, errorDelayMax)
			continue
		case n > 0:
			// Claim again at once: a full batch may have left rows behind, and a recorded head
			// unblocks its partition's successor, which no NOTIFY announces.
			errDelay = errorDelayMin
			r.lastFound = time.Now()
			continue
		default:
			errDelay = errorDelayMin
			if wait, err = r.nextWake(ctx); err != nil {
				return err
			}
		}
		timer.Reset(wait)
		select {
		case <-ctx.Done():
			return nil
		case <-r.wake:
			r.woke(ctx)
		case <-timer.C:
		}
	}
}

// backOff waits d after a failed claim or batch, and reports false when ctx ended first. A NOTIFY
// or a freed apply slot does not end the wait: while producers kept committing, a drainer whose
// claims failed (a revoked grant, a database refusing the call) retried at their pace. The claim
// after the wait takes what they committed. A LISTEN connection made again does end it: the
// database is reachable again (a restart, a failover), and the claim should not wait out a backoff
// of up to errorDelayMax.
func (r *runner[T]) backOff(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return false
		case <-t.C:
			return true
		case <-r.wake:
			if r.waiting.reconnected.Load() {
				r.woke(ctx)
				return true
			}
		}
	}
}

// freeSlots is how many applies a lock-mode batch may start now: ApplyConcurrency less the applies
// still running that earlier batches gave up on (Drainer.inflight). It can only grow meanwhile.
func (r *runner[T]) freeSlots() int {
	return r.cfg.ApplyConcurrency - r.d.inflight.count()
}

// nextWake is how long to sleep: a few milliseconds while busy-polling (Config.BusyPoll), else
// PollFallback, or less when a lease or backoff that parks work ends sooner (outbox.next_due: the parked heads of a partitioned queue, the first pending rows in
// claim order of an unpartitioned one). Its error is Run's when the pool was closed under it
// (see poolClosed); any other failure is logged and slept on.
func (r *runner[T]) nextWake(ctx context.Context) (time.Duration, error) {
	if d := r.busyPoll(); d > 0 {
		return d, nil
	}
	wait := r.cfg.PollFallback
	cctx, cancel := r.bounded(ctx)
	due, err := queryNextDue(cctx, r.d.db, r.reg.queue)
	cancel()
	if err != nil {
		if ctx.Err() != nil {
			return wait, nil
		}
		if closed := poolClosed(err); closed != nil {
			return 0, closed
		}
		// The database went away between the claim and this call: try again as soon as a failed
		// claim would (the LISTEN connection's return also wakes the drainer), not PollFallback later.
		if cause := unavailable(err); cause != "" {
			wait = min(wait, errorDelayMax)
			r.d.logger.WarnContext(ctx, "reading the next wake-up time failed (database unavailable)", "err", err,
				"cause", cause, "retry_in", wait)
			return wait, nil
		}
		r.d.logger.WarnContext(ctx, "reading the next wake-up time; waiting for PollFallback", "err", err)
		return wait, nil
	}
	if due != nil {
		wait = min(wait, max(*due, minWakeDelay))
	}
	return r.markWaiting(ctx, wait), nil
}
