package drainer

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgdrain/pgdrain/internal/cohort"
)

// lockBatch is one round of lock mode (seed 001's claim transaction): BEGIN; claim_locked; apply;
// settle_locked; COMMIT, all within LockTransactionTimeout. Every apply's deadline is at most
// LeaseMargin before that bound (settleBy), and no apply starts after it. At settleBy, or when the
// applies in flight at shutdown have had their ApplyTimeout, the rows whose applies returned are
// settled and committed; an apply still running then is given up on, and its row is unlocked
// untouched by the COMMIT and claimed again. Rows not started are likewise left untouched.
func (r *runner[T]) lockBatch(ctx context.Context) (int, error) {
	start := time.Now()
	txEnd := start.Add(r.cfg.LockTransactionTimeout)
	settleBy := txEnd.Add(-LeaseMargin)
	// BEGIN and the claim share one ClaimTimeout: a dead connection is abandoned, not waited for.
	cctx, cancelClaim := r.bounded(ctx)
	defer cancelClaim()
	tx, err := r.d.db.Begin(cctx)
	if err != nil {
		return 0, translate("claiming batch", err)
	}
	defer func() {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), LeaseMargin)
		defer cancel()
		_ = tx.Rollback(rctx) // no-op after Commit
	}()
	size := r.cfg.claimSize()
	if r.cfg.ApplyConcurrency > 1 { // a claim fills the free slots (see lockLoop)
		size = max(min(size, r.freeSlots()), 1)
	}
	jobs, err := queryClaimLocked(cctx, tx, r.reg.queue, size, r.cfg.RunLength, lockIdleBound(r.cfg.LockTransactionTimeout))
	cancelClaim()
	if err != nil {
		return 0, err
	}
	r.claimed(start, jobs, size)
	r.metrics.observeClaim(ClaimLock, time.Since(start))
	for _, j := range jobs {
		j.deadline = settleBy
	}

	done, skipped := r.applyLocked(ctx, jobs, settleBy)

	// Settle and commit within the bound (at least LeaseMargin, when an overrun used it up).
	rctx, cancel := context.WithDeadline(context.WithoutCancel(ctx), later(txEnd, time.Now().Add(LeaseMargin)))
	defer cancel()
	var settled []*job
	if len(done) > 0 {
		if settled, err = r.settleLocked(rctx, tx, done); err != nil {
			return len(jobs), r.lockTxEnded(err, len(done))
		}
	}
	// An empty claim may still have written (woken parked heads, refreshed stale ones): commit it.
	if err := tx.Commit(rctx); err != nil {
		return len(jobs), r.lockTxEnded(translate("committing batch", err), len(done))
	}
	for _, j := range settled {
		r.metrics.recorded(j.disposition)
	}
	// Rows skipped because an apply of theirs still runs count as not found: claiming again at once
	// would find them again, for as long as that apply runs.
	return len(jobs) - skipped, nil
}

// settleLocked records the results of done in tx (outbox.settle_locked) and returns the jobs it
// recorded. A batch with a failed row carries what the Applier said (an error text, a retry
// time), which the server may refuse: it is settled in a savepoint, so that a refusal (a data
// exception) costs the claim transaction nothing and the rows are settled one by one
// (recordEach). A batch of sent rows carries nothing but ids and outcomes and is settled without
// one: the fast path takes no subtransaction.
func (r *runner[T]) settleLocked(ctx context.Context, tx pgx.Tx, done []*job) ([]*job, error) {
	settle := querySettleLocked
	failed := slices.ContainsFunc(done, func(j *job) bool { return j.disposition != DispositionSent })
	if failed {
		settle = querySettleLockedInSavepoint
	}
	n, err := settle(ctx, tx, r.reg.queue, done)
	if err == nil && n != int64(len(done)) {
		r.d.logger.WarnContext(ctx, "settle_locked recorded fewer rows than applied", "applied", len(done), "settled", n)
	}
	switch {
	case err == nil:
		return done, nil
	case !failed || dataException(err) == nil:
		return nil, err
	}
	var settled []*job
	_, err = r.recordEach(ctx, done, err, func(j *job) (bool, error) {
		n, err := querySettleLockedInSavepoint(ctx, tx, r.reg.queue, []*job{j})
		if n == 1 {
			settled = append(settled, j)
		}
		return n == 1, err
	})
	return settled, err
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// applyLocked applies jobs with at most ApplyConcurrency at a time, in claim order (a partition's
// run in one slot, in its order, up to its first row not sent), and returns
// those whose apply returned in time to be settled. It stops starting applies at settleBy or when
// ctx ends; it stops waiting settleSlack after settleBy (an apply whose deadline that is returns
// a moment after it), or ApplyTimeout after ctx ended. An apply given up on keeps its slot until
// it returns (r.d.inflight), and its row, claimed again meanwhile, is not applied again: it is
// skipped with the rest of its run, left unsettled (skipped counts them).
func (r *runner[T]) applyLocked(ctx context.Context, jobs []*job, settleBy time.Time) (done []*job, skipped int) {
	if len(jobs) == 0 {
		return nil, 0
	}
	var skips atomic.Int64
	finished := make(chan *job, len(jobs)) // never blocks, also for applies given up on
	firsts := runs(jobs)
	var next atomic.Int64
	var stop atomic.Bool
	applying := func() bool { return !stop.Load() && ctx.Err() == nil && time.Now().Before(settleBy) }
	var wg sync.WaitGroup
	workers := max(min(r.freeSlots(), len(firsts)), 1)
	started := cohort.New(workers) // every worker's first row: applied together
	for range workers {
		wg.Go(func() {
			first := true
			defer func() {
				if first {
					started.Done() // stopped before its first row
				}
			}()
			for applying() {
				i := int(next.Add(1)) - 1
				if i >= len(firsts) {
					return
				}
				if first {
					firsts[i].cohort, first = started, false
				}
				// A run in its partition's order, up to its first row not sent: the rows after it
				// stay unsettled, unlocked untouched by the COMMIT.
				for j := firsts[i]; j != nil && (j == firsts[i] || applying()); j = j.next {
					if !r.d.inflight.begin(j.event.ID) {
						if j.cohort != nil {
							j.cohort.Done() // never reaches the Applier
						}
						skips.Add(int64(len(j.rest())))
						break
					}
					r.applyOne(ctx, j)
					r.d.inflight.end(j.event.ID)
					finished <- j
					if j.disposition != DispositionSent {
						break
					}
				}
			}
		})
	}
	allDone := make(chan struct{})
	go func() {
		wg.Wait()
		close(allDone)
	}()
	// An apply whose deadline is settleBy (every apply of a one-wave batch: ApplyConcurrency > 1)
	// and that honours its context returns a moment after it: wait that moment (settleSlack, out of
	// the LeaseMargin kept for settling) before giving up on it, or its timeout is dropped
	// unrecorded (no attempt counted, no backoff) and the row claimed again at once, for ever.
	bound := time.NewTimer(time.Until(settleBy) + settleSlack)
	defer bound.Stop()
	var grace <-chan time.Time
	cancelled := ctx.Done()
	collect := func() []*job {
		stop.Store(true)
		for {
			select {
			case j := <-finished:
				done = append(done, j)
			default:
				return done
			}
		}
	}
	for {
		select {
		case j := <-finished:
			done = append(done, j)
		case <-allDone:
			return collect(), int(skips.Load())
		case <-cancelled:
			cancelled = nil
			t := time.NewTimer(r.cfg.ApplyTimeout + shutdownSlack)
			defer t.Stop()
			grace = t.C
		case <-grace:
			collect()
			r.d.logger.WarnContext(ctx, "applies still running after ApplyTimeout at shutdown: they ignore their context; "+
				"their rows are left unsettled and will be delivered again", "settled", len(done), "claimed", len(jobs))
			return done, int(skips.Load())
		case <-bound.C:
			collect()
			r.d.logger.WarnContext(ctx, "lock-mode batch reached LockTransactionTimeout with applies still running: "+
				"an Applier ignores its context; settling what returned, the rest is claimed again",
				"settled", len(done), "claimed", len(jobs), "lock_transaction_timeout", r.cfg.LockTransactionTimeout)
			return done, int(skips.Load())
		}
	}
}

// lockIdleBound is the idle_in_transaction_session_timeout a claim transaction runs with: it is
// idle while its applies run, and the drainer settles and commits it within LockTransactionTimeout
// (its last call may start at that bound and has LeaseMargin). Past that its client is gone or
// stalled, and the server ends it, freeing its row locks.
func lockIdleBound(lockTransactionTimeout time.Duration) time.Duration {
	return lockTransactionTimeout + 2*LeaseMargin
}

// lockTxEnded explains a failed settle or commit: when the server ended the claim transaction
// (the process stalled past lockIdleBound, or the connection died) nothing of the batch was
// written, so its rows, unlocked, are claimed again (and the applied ones delivered again).
func (r *runner[T]) lockTxEnded(err error, applied int) error {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "25P03" {
		return fmt.Errorf("the server ended the claim transaction (idle for longer than LockTransactionTimeout %s + %s: "+
			"was this process stalled?): the %d applied rows were not recorded and will be claimed again: %w",
			r.cfg.LockTransactionTimeout, 2*LeaseMargin, applied, err)
	}
	return fmt.Errorf("the claim transaction failed: the %d applied rows were not recorded and will be claimed again: %w", applied, err)
}
