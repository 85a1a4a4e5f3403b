package drainer

import (
	"context"
	"time"
)

// leaseBatch is one round of lease mode: claim_batch (short transaction), applies outside any
// transaction, one apply_results round trip (more only when a slow apply holds the batch so long
// that finished rows would otherwise lose their leases), and release of the rows not started.
func (r *runner[T]) leaseBatch(ctx context.Context) (int, error) {
	start := time.Now()
	jobs, err := queryClaimBatch(ctx, r.d.pool, r.reg.queue, r.cfg.claimSize(), r.cfg.Lease, start.Add(r.cfg.Lease-LeaseMargin))
	if err != nil {
		return 0, err
	}
	r.d.metrics.observeClaim(ClaimLease, time.Since(start))
	if len(jobs) == 0 {
		return 0, nil
	}
	rec := r.startRecorder(ctx)
	r.applyJobs(ctx, jobs, r.ensureLease, rec.finished)
	rec.close()
	r.releaseUnstarted(ctx, jobs)
	return len(jobs), nil
}

// ensureLease makes sure j's lease outlasts a full ApplyTimeout before it is applied, extending
// it when an earlier apply of the batch used up the time. false = do not apply (lease lost, or
// the extension failed with no time left).
func (r *runner[T]) ensureLease(ctx context.Context, j *job) bool {
	if time.Until(j.deadline) >= r.cfg.ApplyTimeout {
		return true
	}
	start := time.Now()
	until, err := queryExtendLease(ctx, r.d.pool, r.reg.queue, j, r.cfg.Lease)
	switch {
	case err != nil && time.Until(j.deadline) > 0:
		r.d.logger.WarnContext(ctx, "extending lease failed; applying with the time left", "id", j.event.ID, "err", err)
		return true
	case err != nil:
		r.d.logger.WarnContext(ctx, "extending lease failed; leaving the row", "id", j.event.ID, "err", err)
		j.started = false
		return false
	case until == nil:
		j.leaseLost = true
		r.d.metrics.leaseLost.Inc()
		r.d.logger.DebugContext(ctx, "lease lost before apply; not applying", "id", j.event.ID)
		return false
	}
	j.deadline = start.Add(r.cfg.Lease - LeaseMargin)
	return true
}

// recordLeased writes the results of the started applies in one apply_results round trip. A row
// reported applied = false was no longer ours (its lease ran out and someone else took it): it is
// counted, never retried from here.
func (r *runner[T]) recordLeased(ctx context.Context, jobs []*job) {
	var done []*job
	for _, j := range jobs {
		if j.started && !j.leaseLost {
			done = append(done, j)
		}
	}
	if len(done) == 0 {
		return
	}
	byID := make(map[int64]*job, len(done))
	for _, j := range done {
		byID[j.event.ID] = j
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), recordTimeout)
	defer cancel()
	err := queryApplyResults(rctx, r.d.pool, r.reg.queue, done, func(id int64, applied bool) {
		j := byID[id]
		if applied {
			r.d.metrics.recorded(j.disposition)
			return
		}
		r.d.metrics.leaseLost.Inc()
		r.d.logger.DebugContext(ctx, "result refused: lease lost (the row was claimed again)",
			"id", id, "outcome", j.disposition.String())
	})
	if err != nil {
		r.d.logger.ErrorContext(ctx, "recording results failed; the rows will be claimed again when their leases end",
			"rows", len(done), "err", err)
	}
}

// releaseUnstarted gives back, in one round trip, the rows claimed but never started (Run's ctx
// ended first), so another drainer can take them at once, with no attempt counted.
func (r *runner[T]) releaseUnstarted(ctx context.Context, jobs []*job) {
	var unstarted []*job
	for _, j := range jobs {
		if !j.started {
			unstarted = append(unstarted, j)
		}
	}
	if len(unstarted) == 0 {
		return
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), recordTimeout)
	defer cancel()
	if err := queryRelease(rctx, r.d.pool, r.reg.queue, unstarted); err != nil {
		r.d.logger.WarnContext(ctx, "releasing unstarted rows failed; their leases will expire", "rows", len(unstarted), "err", err)
		return
	}
	r.d.logger.DebugContext(ctx, "released unstarted rows", "rows", len(unstarted))
}
