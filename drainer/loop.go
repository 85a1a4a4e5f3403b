package drainer

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

const (
	// minWakeDelay keeps a wake-up scheduled for "now" from turning into a busy loop.
	minWakeDelay = 100 * time.Millisecond
	// errorDelayMin and errorDelayMax bound the pause after a failed batch (database down).
	errorDelayMin = 100 * time.Millisecond
	errorDelayMax = 5 * time.Second
	// recordTimeout bounds writing a batch's results, which must happen even after Run's ctx ends.
	recordTimeout = 10 * time.Second
	// wakeSample is how many pending rows of an unpartitioned queue the wake-up query looks at.
	wakeSample = 256
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

// nextWake is how long to sleep: PollFallback, or less when a backoff or lease in the queue ends
// sooner. Partitioned queues read the parked heads (one index probe); unpartitioned ones look at
// the first wakeSample pending rows in claim order, through the claim index.
func (r *runner[T]) nextWake(ctx context.Context) time.Duration {
	wait := r.cfg.PollFallback
	var secs *float64
	var err error
	if r.reg.partitionColumn != "" {
		err = r.d.pool.QueryRow(ctx, `
			SELECT extract(epoch FROM min(h.parked_until) - now())::float8
			FROM outbox.partition_heads h WHERE h.queue_id = $1 AND h.parked_until IS NOT NULL`,
			r.reg.queueID).Scan(&secs)
	} else {
		err = r.d.pool.QueryRow(ctx, fmt.Sprintf(`
			SELECT extract(epoch FROM min(GREATEST(s.next_attempt_at, s.leased_until)) - now())::float8
			FROM (SELECT t.next_attempt_at, t.leased_until FROM %s t
			      WHERE t.sent_at IS NULL AND t.attempt_count < $1
			      ORDER BY t.attempt_count, t.id LIMIT %d) s`, r.relation(), wakeSample),
			r.reg.maxAttempts).Scan(&secs)
	}
	if err != nil {
		if ctx.Err() == nil {
			r.d.logger.WarnContext(ctx, "reading the next wake-up time", "err", err)
		}
		return wait
	}
	if secs != nil {
		wait = min(wait, max(time.Duration(*secs*float64(time.Second)), minWakeDelay))
	}
	return wait
}

// relation is the queue table as a quoted SQL identifier.
func (r *runner[T]) relation() string {
	return pgx.Identifier(strings.SplitN(r.reg.queue, ".", 2)).Sanitize()
}
