package drainer

import (
	"context"
	"time"
)

const (
	// minWakeDelay keeps a wake-up scheduled for "now" from turning into a busy loop.
	minWakeDelay = 100 * time.Millisecond
	// errorDelayMin and errorDelayMax bound the pause after a failed batch (database down).
	errorDelayMin = 100 * time.Millisecond
	errorDelayMax = 5 * time.Second
	// recordTimeout bounds writing a batch's results, which must happen even after Run's ctx ends.
	recordTimeout = 10 * time.Second
)

// runner is one Run: the resolved config and the wake-up channel.
type runner[T any] struct {
	d    *Drainer[T]
	cfg  Config
	reg  registration
	wake chan struct{}
}

// signal asks the loop to claim now (a NOTIFY arrived, or LISTEN reconnected).
func (r *runner[T]) signal() {
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// loop claims batches until ctx ends: at once after any batch that found rows (so always after a
// full one), otherwise on a wake-up, at the earliest backoff or lease end in the queue, or after
// PollFallback.
func (r *runner[T]) loop(ctx context.Context) error {
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	errDelay := errorDelayMin
	for {
		if ctx.Err() != nil {
			return nil
		}
		n, err := r.batch(ctx)
		if ctx.Err() != nil {
			return nil
		}
		var wait time.Duration
		switch {
		case err != nil:
			r.d.logger.ErrorContext(ctx, "draining batch failed; retrying", "err", err, "retry_in", errDelay)
			wait, errDelay = errDelay, min(2*errDelay, errorDelayMax)
		case n > 0:
			// Claim again at once: a full batch may have left rows behind, and a recorded head
			// unblocks its partition's successor, which no NOTIFY announces.
			errDelay = errorDelayMin
			continue
		default:
			errDelay = errorDelayMin
			wait = r.nextWake(ctx)
		}
		timer.Reset(wait)
		select {
		case <-ctx.Done():
			return nil
		case <-r.wake:
		case <-timer.C:
		}
	}
}

// batch claims, applies and records one batch in the configured mode; it returns how many rows
// it claimed.
func (r *runner[T]) batch(ctx context.Context) (int, error) {
	if r.cfg.ClaimMode == ClaimLock {
		return r.lockBatch(ctx)
	}
	return r.leaseBatch(ctx)
}

// nextWake is how long to sleep: PollFallback, or less when a lease or backoff that parks work
// ends sooner (outbox.next_due: the parked heads of a partitioned queue, the first pending rows in
// claim order of an unpartitioned one).
func (r *runner[T]) nextWake(ctx context.Context) time.Duration {
	wait := r.cfg.PollFallback
	due, err := queryNextDue(ctx, r.d.pool, r.reg.queue)
	if err != nil {
		if ctx.Err() == nil {
			r.d.logger.WarnContext(ctx, "reading the next wake-up time; waiting for PollFallback", "err", err)
		}
		return wait
	}
	if due != nil {
		wait = min(wait, max(*due, minWakeDelay))
	}
	return wait
}
