package drainer

import (
	"context"
	"time"
)

// lockBatch is one round of lock mode (seed 001's claim transaction): BEGIN; claim_locked; apply
// (each bounded by ApplyTimeout); settle_locked; COMMIT. Rows not started when Run's ctx ends are
// simply not settled: COMMIT unlocks them untouched.
func (r *runner[T]) lockBatch(ctx context.Context) (int, error) {
	start := time.Now()
	tx, err := r.d.pool.Begin(ctx)
	if err != nil {
		return 0, translate("claiming batch", err)
	}
	defer func() {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), recordTimeout)
		defer cancel()
		_ = tx.Rollback(rctx) // no-op after Commit
	}()
	jobs, err := queryClaimLocked(ctx, tx, r.reg.queue, r.cfg.claimSize())
	if err != nil {
		return 0, err
	}
	r.d.metrics.observeClaim(ClaimLock, time.Since(start))

	r.applyJobs(ctx, jobs, nil, nil)

	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), recordTimeout)
	defer cancel()
	var done []*job
	for _, j := range jobs {
		if j.started {
			done = append(done, j)
		}
	}
	if len(done) > 0 {
		settled, err := querySettleLocked(rctx, tx, r.reg.queue, done)
		if err != nil {
			return len(jobs), err
		}
		if settled != int64(len(done)) {
			r.d.logger.WarnContext(ctx, "settle_locked recorded fewer rows than applied", "applied", len(done), "settled", settled)
		}
	}
	// An empty claim may still have written (woken parked heads, refreshed stale ones): commit it.
	if err := tx.Commit(rctx); err != nil {
		return len(jobs), translate("committing batch", err)
	}
	for _, j := range done {
		r.d.metrics.recorded(j.disposition)
	}
	return len(jobs), nil
}
