package drainer

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgdrain/pgdrain/internal/errtext"
	"github.com/pgdrain/pgdrain/internal/guard"
)

// TxApplier applies a whole lock-mode batch inside the transaction that claimed it: what it writes
// with tx commits together with the batch's results, or not at all. It is for an apply that is
// itself a database write (copying each event into other queues: the relay's fan-out), where the
// claim transaction makes "applied" and "recorded" one atomic step, so nothing is ever applied
// twice.
//
// batch holds the rows claimed, in claim order: at most one row per partition key (a key's next row
// is claimed only once this one is recorded), or a key's run in its order with RunLength > 1. A
// nil error records every row of batch as sent. An error (or a panic, logged at Error) undoes what
// the call wrote (it runs in a savepoint), and the drainer then calls the TxApplier again for each
// row of batch alone, in claim order, each call in a savepoint of its own: a row whose own call
// succeeds is recorded as sent with what that call wrote; a row whose own call fails is recorded
// as an Applier's error is (an attempt counted, the queue's backoff or the error's RetryAt, the
// error as last_error; Permanent poisons it, on a partitioned queue a transient failure never
// does), and its key's later rows in batch are left for a later claim. So one row the TxApplier can
// never apply costs its own key, visibly, not every row of the queue. An error that is the
// database's or the setup's rather than a row's (a PostgreSQL error of SQLSTATE class 08, 25, 40,
// 42, 53, 55, 57 or 58: a lost connection, a deadlock, a missing privilege or table, a lock timeout)
// rolls the whole transaction back instead, counting no attempt: its rows are claimed again after
// the drainer's error backoff. A call that returns once its ctx has ended, having been given at
// least half its ApplyTimeout, ran out of its time: whatever its error (a systemic one aside, but
// for a statement its ctx cancelled, SQLSTATE 57014), that is the rows' failure (a row alone is
// charged an attempt, as an Applier's timeout is), and the rows of a batch that ran out of time are
// applied one at a time whenever a later claim of this Run brings one of them back, each call with
// its own time, until a row's own call succeeds: so a row on which the TxApplier hangs costs its
// own key, not the queue. (A row whose own call ran out of time and lost the transaction with it,
// as a statement its ctx interrupts does by closing pgx's connection, is charged at its next
// claim, without a call.) A call given less than that, the transaction being nearly over when it
// began, charges nothing. ctx ends ApplyTimeout after the call,
// and at the latest LeaseMargin before the transaction's LockTransactionTimeout; it is not
// cancelled by Run's ctx. A call still running a second after its ctx ended is given up on: its
// connection is closed under it (the server rolls the transaction back and unlocks its rows, which
// are claimed again), no other batch is claimed until it returns, and Run does not wait for it
// when it ends. tx must not be committed, rolled back or used after the call returns. tx is READ
// COMMITTED whatever the database's default_transaction_isolation (pgdrain's claims need it; see
// docs/go.md): business writes that need another level belong in a transaction of their own.
type TxApplier func(ctx context.Context, tx pgx.Tx, batch []TxEvent) error

// TxEvent is one claimed row as a TxApplier gets it.
type TxEvent struct {
	Event
	// Payload is the row's payload as stored (jsonb text).
	Payload []byte
}

// WithTxApplier makes a lock-mode drainer apply each batch with fn in its claim transaction
// instead of calling the Applier once per row (which may then be nil in New). It needs
// Config.ClaimMode ClaimLock; set ApplyConcurrency to the claim size (a batch is applied at once,
// so one wave of ApplyTimeout is all LockTransactionTimeout needs). A transaction claims again
// after recording a batch, in the same transaction, while the last claim found rows, fewer than
// the claim size (BatchSize, or ApplyConcurrency when above 1) were recorded and the transaction
// is younger than 100ms (TxApplierRounds): a claim returns one row per partition key, so this is
// what lets a busy key move more than one row per transaction, while its rows still become
// visible within about that long. Tracing (WithTracerProvider) makes no span for these batches.
func WithTxApplier[T any](fn TxApplier) Option[T] {
	return func(d *Drainer[T]) { d.txApply = fn }
}

// TxApplierRounds is how long a WithTxApplier transaction goes on claiming again after a batch
// it recorded: past it, what it holds is committed and the next transaction claims.
const TxApplierRounds = 100 * time.Millisecond

// errTxApplierNeedsLock is New's error for WithTxApplier in lease mode.
var errTxApplierNeedsLock = errors.New("WithTxApplier needs ClaimMode ClaimLock: it writes in the claim transaction")

// txBatch is one transaction of lock mode with a TxApplier: BEGIN; then rounds of claim_locked,
// the TxApplier and settle_locked (every row sent); COMMIT. Any failure rolls back all rounds.
func (r *runner[T]) txBatch(ctx context.Context) (int, error) {
	if overrun := r.d.txOverrun; overrun != nil {
		select {
		case <-overrun:
			r.d.txOverrun = nil
		case <-ctx.Done():
			return 0, nil
		}
	}
	start := time.Now()
	settleBy := start.Add(r.cfg.LockTransactionTimeout - LeaseMargin)
	cctx, cancelBegin := r.bounded(ctx)
	defer cancelBegin()
	tx, err := r.d.db.Begin(cctx)
	if err != nil {
		return 0, translate("claiming batch", err)
	}
	defer func() {
		if r.d.txOverrun != nil { // tx is the overrunning TxApplier's, which rolls it back
			return
		}
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), LeaseMargin)
		defer cancel()
		_ = tx.Rollback(rctx) // no-op after Commit
	}()
	size := r.cfg.claimSize()
	total := 0
	var settled []*job
	for total < size && ctx.Err() == nil && time.Now().Before(settleBy) && (total == 0 || time.Since(start) < TxApplierRounds) {
		n, round, err := r.txRound(ctx, tx, size-total, settleBy)
		total += n
		if err != nil {
			err = fmt.Errorf("the batch's transaction was rolled back, its %d rows will be claimed again: %w", total, err)
			if errors.Is(err, errTxLost) && errors.As(err, new(*outOfTimeError)) && !databaseFailure(err) {
				// Lost with a call that ran out of its time (pgx closes the connection of a statement
				// its ctx interrupts), not by the database: its rows are remembered (r.timedOut), and
				// the next claim applies them one at a time or charges the one that hung. Claimed
				// again at once, not after the error backoff, which had every hanging row stop the
				// whole queue for up to errorDelayMax.
				r.d.logger.WarnContext(ctx, "a TxApplier call ran out of its time and its transaction was lost with it; "+
					"its rows are claimed again, the one that hung is charged", "queue", r.reg.queue,
					"err", errtext.Recordable(err.Error(), errtext.LogBytes))
				return total, nil
			}
			return total, err
		}
		settled = append(settled, round...)
		if n == 0 || len(round) < n {
			break // a round that left rows unsettled: commit what is settled, claim afresh
		}
	}
	// Like lockBatch, an empty claim may have written (woken parked heads): commit it too.
	wctx, cancel := context.WithDeadline(context.WithoutCancel(ctx), later(settleBy.Add(LeaseMargin), time.Now().Add(LeaseMargin)))
	defer cancel()
	if err := tx.Commit(wctx); err != nil {
		return total, r.lockTxEnded(translate("committing batch", err), total)
	}
	r.timedOut.settled(settled)
	for _, j := range settled {
		r.metrics.recorded(j.disposition)
	}
	return total, nil
}

// txRound claims up to n rows in tx, applies them with the TxApplier and settles them: all sent, or
// after a failed call what isolate made of them. It returns how many rows it claimed and those it
// settled (the others, left by isolate, are unlocked at COMMIT and claimed again).
func (r *runner[T]) txRound(ctx context.Context, tx pgx.Tx, n int, settleBy time.Time) (int, []*job, error) {
	start := time.Now()
	cctx, cancel := r.bounded(ctx)
	jobs, err := queryClaimLocked(cctx, tx, r.reg.queue, n, r.cfg.RunLength, lockIdleBound(r.cfg.LockTransactionTimeout))
	cancel()
	if err != nil {
		return 0, nil, err
	}
	r.claimed(start, jobs, n)
	if len(jobs) == 0 {
		return 0, nil, nil
	}
	r.metrics.observeClaim(ClaimLock, time.Since(start))
	var settle []*job
	if r.timedOut.any(jobs) {
		// A row here ran out of a batch's time before: one at a time, each with its own time.
		if settle, err = r.applyAlone(ctx, tx, jobs, settleBy); err != nil {
			return len(jobs), nil, fmt.Errorf("applying the batch in its transaction: %w", err)
		}
		return r.settleIsolated(ctx, tx, len(jobs), settle, settleBy)
	}
	err = r.applyInSavepoint(ctx, tx, jobs, settleBy)
	sctx, cancel := context.WithDeadline(context.WithoutCancel(ctx), later(settleBy.Add(LeaseMargin), time.Now().Add(LeaseMargin)))
	defer cancel()
	if err == nil {
		for _, j := range jobs {
			j.disposition = DispositionSent
		}
		settled, err := querySettleLocked(sctx, tx, r.reg.queue, jobs)
		if err != nil {
			return len(jobs), nil, err
		}
		if settled != int64(len(jobs)) {
			return len(jobs), nil, fmt.Errorf("settle_locked recorded %d of %d rows", settled, len(jobs))
		}
		return len(jobs), jobs, nil
	}
	if errors.Is(err, errTxLost) || databaseFailure(err) {
		return len(jobs), nil, fmt.Errorf("applying the batch in its transaction: %w", err)
	}
	if errors.As(err, new(*cutShortError)) {
		r.d.logger.WarnContext(ctx, "the TxApplier's call was cut short by the end of its transaction (LockTransactionTimeout); "+
			"its rows are claimed again, no attempt counted", "queue", r.reg.queue, "rows", len(jobs),
			"err", errtext.Recordable(err.Error(), errtext.LogBytes))
		return len(jobs), nil, nil
	}
	if settle, err = r.isolate(ctx, tx, jobs, err, settleBy); err != nil {
		return len(jobs), nil, fmt.Errorf("applying the batch in its transaction: %w", err)
	}
	return r.settleIsolated(ctx, tx, len(jobs), settle, settleBy)
}

// settleIsolated records what isolate or applyAlone made of a round's claimed rows (the others
// are unlocked at COMMIT and claimed again), and returns claimed and the rows recorded.
func (r *runner[T]) settleIsolated(ctx context.Context, tx pgx.Tx, claimed int, settle []*job, settleBy time.Time) (int, []*job, error) {
	if len(settle) == 0 {
		return claimed, nil, nil
	}
	sctx, cancel := context.WithDeadline(context.WithoutCancel(ctx), later(settleBy.Add(LeaseMargin), time.Now().Add(LeaseMargin)))
	defer cancel()
	// Failures may be refused (a retry time past the queue's max_delay, an error text the
	// database's encoding can not hold): settleLocked records them in a savepoint, and row by row,
	// escaped, when refused, a key's rows after one it could not record left out (their links).
	runs(settle)
	recorded, err := r.settleLocked(sctx, tx, settle)
	if err != nil {
		return claimed, nil, err
	}
	return claimed, recorded, nil
}

// systemic tells whether a TxApplier's error is the database's or the setup's rather than one
// row's (SQLSTATE classes 08 connection, 25 transaction state, 40 serialization failure or
// deadlock, 42 a privilege or an object missing, 53 resources, 55 a lock not available, 57
// operator intervention, 58 system): the whole transaction is rolled back, as before, and no row
// is charged an attempt for it. A role without pgdrain_producer in the relay's fan-out would
// otherwise count an attempt on every row, and poison an unpartitioned queue's rows.
func systemic(err error) bool {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || len(pgErr.Code) < 2 {
		return false
	}
	switch pgErr.Code[:2] {
	case "08", "25", "40", "42", "53", "55", "57", "58":
		return true
	}
	return false
}

// databaseFailure tells whether a TxApplier call's err is the database's or the setup's (systemic),
// in a batch's call or a row's own alike: the whole transaction is rolled back and no row charged.
// A systemic error stays one when the call ran out of its time too (a lock_timeout a little before
// the call's deadline, answered after it on a loaded machine): only the statement its ctx
// cancelled (57014) is the call's hang, charged to its rows.
func databaseFailure(err error) bool {
	return systemic(err) && !(errors.As(err, new(*outOfTimeError)) && queryCanceled(err))
}

// queryCanceled tells whether err is a statement cancelled (SQLSTATE 57014: a ctx whose pgx
// handler sends a cancel request, a statement_timeout, pg_cancel_backend).
func queryCanceled(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "57014"
}

// errTxLost marks an error after which tx can not go on (the TxApplier was given up on and its
// connection closed, or its savepoint could not be rolled back): the whole transaction is rolled
// back.
var errTxLost = errors.New("the transaction can not go on")

// applyInSavepoint calls the TxApplier for jobs in a savepoint of tx (sqlApplySavepoint), released
// when the call succeeds and rolled back when it fails: tx then goes on as if the call had not
// run. An error matching errTxLost means tx is lost.
func (r *runner[T]) applyInSavepoint(ctx context.Context, tx pgx.Tx, jobs []*job, settleBy time.Time) error {
	batch := make([]TxEvent, len(jobs))
	for i, j := range jobs {
		batch[i] = TxEvent{Event: j.event, Payload: j.payload}
	}
	deadline := time.Now().Add(r.cfg.ApplyTimeout)
	if settleBy.Before(deadline) {
		deadline = settleBy
	}
	// The savepoint's statements are bound as the settle is (txRound), not by the apply's deadline,
	// and from when each is sent: a call that used up its time still has its savepoint rolled back.
	bounded := func() (context.Context, context.CancelFunc) {
		return context.WithDeadline(context.WithoutCancel(ctx), later(settleBy.Add(LeaseMargin), time.Now().Add(LeaseMargin)))
	}
	bctx, cancel := bounded()
	_, err := tx.Exec(bctx, sqlApplySavepoint)
	cancel()
	if err != nil {
		return fmt.Errorf("%w: %w", errTxLost, translate("making the TxApplier's savepoint", err))
	}
	called := time.Now()
	actx, cancelApply := context.WithDeadline(context.WithoutCancel(ctx), deadline)
	err = r.callTxApplier(ctx, actx, tx, batch, deadline)
	cancelApply()
	if errors.Is(err, errTxApplierOverrun) {
		r.timedOut.ranOut(jobs, true, err)
		return fmt.Errorf("%w: %w", errTxLost, err)
	}
	outOfTime := false
	if allowed := deadline.Sub(called); err != nil && !time.Now().Before(deadline) {
		if outOfTime = allowed >= r.cfg.ApplyTimeout/2; outOfTime {
			err = &outOfTimeError{err: err, allowed: allowed}
		} else {
			err = &cutShortError{err: err, allowed: allowed}
		}
	}
	bctx, cancel = bounded()
	defer cancel()
	if err == nil {
		if _, cerr := tx.Exec(bctx, sqlReleaseApplySavepoint); cerr != nil {
			return fmt.Errorf("%w: %w", errTxLost, translate("releasing the TxApplier's savepoint", cerr))
		}
		return nil
	}
	// Both in one round trip, in the simple protocol (no arguments), as querySettleLockedInSavepoint.
	_, rerr := tx.Exec(bctx, sqlRollbackToApplySavepoint)
	// Not a database failure that came back after the deadline: remembered as the rows' own, its
	// charge would be replayed at every claim of the row and rolled back every time.
	if outOfTime && !databaseFailure(err) {
		r.timedOut.ranOut(jobs, rerr != nil, err)
	}
	if rerr != nil {
		return fmt.Errorf("%w: %w (after the TxApplier's error: %w)", errTxLost,
			translate("rolling back to the TxApplier's savepoint", rerr), err)
	}
	return err
}

// isolate settles the rows of a batch whose TxApplier call failed with batchErr: it calls the
// TxApplier for each row alone, in claim order, each call in a savepoint of its own
// (applyInSavepoint), and returns the rows to settle with their dispositions: sent where the row's
// own call succeeded, what its error says where it failed (classify: transient, permanent, a retry
// time). A row whose key has an earlier row here that failed or was not reached is left out, and
// so are the rows not reached before settleBy or the end of Run: a later claim takes them. A
// batch of one row is settled with batchErr, without a second call.
func (r *runner[T]) isolate(ctx context.Context, tx pgx.Tx, jobs []*job, batchErr error, settleBy time.Time) ([]*job, error) {
	if len(jobs) == 1 {
		jobs[0].setOutcome(classifyGuarded(batchErr))
		r.logIsolated(ctx, jobs, batchErr, 0, 1)
		return jobs, nil
	}
	settle, err := r.applyAlone(ctx, tx, jobs, settleBy)
	if err != nil {
		return nil, err
	}
	failed := 0
	for _, j := range settle {
		if j.disposition != DispositionSent {
			failed++
		}
	}
	r.logIsolated(ctx, jobs, batchErr, len(settle)-failed, failed)
	return settle, nil
}

// applyAlone calls the TxApplier for each row of jobs alone, in claim order, each call in a
// savepoint of its own (applyInSavepoint), and returns the rows to settle with their dispositions
// (see isolate). An error matching errTxLost means tx is lost; a row's call that fails with the
// database's or the setup's error (databaseFailure) is returned too: the whole transaction is rolled
// back, no row charged, as for a batch's call.
func (r *runner[T]) applyAlone(ctx context.Context, tx pgx.Tx, jobs []*job, settleBy time.Time) ([]*job, error) {
	var settle []*job
	held := map[string]bool{} // partition keys whose earlier row here failed or was not reached
	for _, j := range jobs {
		keyed := j.event.PartitionKey != ""
		if keyed && held[j.event.PartitionKey] {
			continue
		}
		if ctx.Err() != nil || !time.Now().Before(settleBy) {
			if keyed {
				held[j.event.PartitionKey] = true
			}
			continue
		}
		err := r.timedOut.takeLost(j)
		if err == nil {
			err = r.applyInSavepoint(ctx, tx, []*job{j}, settleBy)
		}
		if errors.Is(err, errTxLost) || databaseFailure(err) {
			return nil, err
		}
		if errors.As(err, new(*cutShortError)) { // not the row's failure: not reached
			if keyed {
				held[j.event.PartitionKey] = true
			}
			continue
		}
		j.setOutcome(classifyGuarded(err))
		if err != nil && keyed {
			held[j.event.PartitionKey] = true
		}
		settle = append(settle, j)
	}
	return settle, nil
}

// classifyGuarded is classify(err), where a panic in err's own methods is the row's permanent
// failure (as invoke has it).
func classifyGuarded(err error) applied {
	return guard.Run(func() applied { return classify(err) }, func(c guard.Crash) applied {
		return classify(Permanent(fmt.Errorf("the TxApplier's error panicked when read: %v", c.Panic)))
	})
}

// logIsolated says what a failed TxApplier call's batch came to, at Warn: a row that fails for
// ever would otherwise be seen only in its attempts.
func (r *runner[T]) logIsolated(ctx context.Context, jobs []*job, batchErr error, sent, failed int) {
	r.d.logger.WarnContext(ctx, "the TxApplier failed on a batch; its rows were applied one at a time: those that failed alone "+
		"are recorded as failures, the others as sent, and rows not reached are claimed again",
		"queue", r.reg.queue, "rows", len(jobs), "sent", sent, "failed", failed, "not_reached", len(jobs)-sent-failed,
		"err", errtext.Recordable(fmt.Sprint(batchErr), errtext.LogBytes))
}

// errTxApplierOverrun is txRound's error for a TxApplier call given up on (see callTxApplier).
var errTxApplierOverrun = errors.New("the TxApplier ignored its context and was given up on a second after its deadline; " +
	"its connection was closed, which rolled the transaction back")

// callTxApplier runs the TxApplier on a goroutine of its own (guard.RunUntil). A panic (or
// runtime.Goexit) becomes the batch's error. A call still running overrunWarnAfter past its
// deadline is given up on: the connection of tx is closed under it (the server then rolls the
// transaction back and unlocks its rows), r.d.txOverrun is set until it returns (txBatch claims
// nothing meanwhile), and tx is the call's to roll back then, which returns the dead connection to
// the pool.
func (r *runner[T]) callTxApplier(ctx, actx context.Context, tx pgx.Tx, batch []TxEvent, deadline time.Time) error {
	overrun := make(chan struct{})
	err, returned := guard.RunUntil(func() error {
		return r.d.txApply(actx, tx, batch)
	}, func(c guard.Crash) error {
		cause := fmt.Sprint(c.Panic)
		if c.Goexit {
			cause = "runtime.Goexit (t.FailNow, t.Fatal or log.Fatal's kin)"
		}
		r.d.logger.ErrorContext(ctx, "the TxApplier panicked; what it wrote is rolled back",
			"rows", len(batch), "panic", cause, "stack", string(c.Stack))
		return fmt.Errorf("the TxApplier panicked: %s", cause)
	}, guard.Deadline[error]{
		At: deadline.Add(overrunWarnAfter),
		OnAbandon: func() {
			r.d.logger.WarnContext(ctx, "the TxApplier is still running a second after its deadline: it ignores its context; "+
				"closing its connection (its transaction is rolled back, its rows claimed again once it returns)", "rows", len(batch))
			r.d.txOverrun = overrun
			_ = tx.Conn().PgConn().Conn().Close() // net.Conn: safe beside the TxApplier's own use of tx
		},
		OnLate: func(error) {
			rctx, cancel := context.WithTimeout(context.Background(), LeaseMargin)
			_ = tx.Rollback(rctx) // fails on the closed connection, which the pool then drops
			cancel()
			close(overrun)
		},
	})
	if !returned {
		return errTxApplierOverrun
	}
	return err
}
