package drainer

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// lockBatch is one round of lock mode (seed 001's claim transaction): BEGIN; claim_locked; apply
// (each bounded by ApplyTimeout); settle_locked; COMMIT. Rows not started when Run's ctx ends are
// simply not settled: COMMIT unlocks them untouched.
func (r *runner[T]) lockBatch(ctx context.Context) (int, error) {
	start := time.Now()
	tx, err := r.d.pool.Begin(ctx)
	if err != nil {
		return 0, fmt.Errorf("claiming batch: %w", err)
	}
	defer func() {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), recordTimeout)
		defer cancel()
		_ = tx.Rollback(rctx) // no-op after Commit
	}()
	rows, err := tx.Query(ctx, `
		SELECT id, event_type, payload, coalesce(partition_key, ''), attempt_count, created_at
		FROM outbox.claim_locked($1, $2)`, r.reg.queue, r.cfg.claimSize())
	if err != nil {
		return 0, fmt.Errorf("claiming batch: %w", err)
	}
	jobs, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (*job, error) {
		j := &job{}
		j.event.Table = r.reg.queue
		err := row.Scan(&j.event.ID, &j.event.Type, &j.payload, &j.event.PartitionKey, &j.event.Attempts, &j.event.CreatedAt)
		return j, err
	})
	if err != nil {
		return 0, fmt.Errorf("claiming batch: %w", err)
	}
	r.d.metrics.observeClaim(ClaimLock, time.Since(start))

	r.applyJobs(ctx, jobs, nil, nil)

	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), recordTimeout)
	defer cancel()
	var done []*job
	var ids []int64
	var outcomes []string
	for _, j := range jobs {
		if j.started {
			done = append(done, j)
			ids = append(ids, j.event.ID)
			outcomes = append(outcomes, j.disposition.String())
		}
	}
	if len(done) > 0 {
		var settled int64
		if err := tx.QueryRow(rctx, `SELECT outbox.settle_locked($1, $2, $3, $4)`,
			r.reg.queue, ids, outcomes, textArray(done)).Scan(&settled); err != nil {
			return len(jobs), fmt.Errorf("settling batch: %w", err)
		}
		if settled != int64(len(done)) {
			r.d.logger.WarnContext(ctx, "settle_locked recorded fewer rows than applied", "applied", len(done), "settled", settled)
		}
	}
	// An empty claim may still have written (woken parked heads, refreshed stale ones): commit it.
	if err := tx.Commit(rctx); err != nil {
		return len(jobs), fmt.Errorf("committing batch: %w", err)
	}
	for _, j := range done {
		r.d.metrics.recorded(j.disposition)
	}
	return len(jobs), nil
}
