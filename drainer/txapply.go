package drainer

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgdrain/pgdrain/internal/guard"
)

// TxApplier applies a whole lock-mode batch inside the transaction that claimed it: what it writes
// with tx commits together with the batch's results, or not at all. It is for an apply that is
// itself a database write (copying each event into other queues: the relay's fan-out), where the
// claim transaction makes "applied" and "recorded" one atomic step, so nothing is ever applied
// twice.
//
// batch holds at most one row per partition key (a key's next row is claimed only once this one is
// recorded), in claim order. A nil error records every row of batch as sent. An error rolls the
// whole transaction back: nothing the TxApplier wrote stays, no row is recorded or counted as an
// attempt, and the rows are claimed again after the drainer's error backoff (so an error never
// poisons a row); so does a panic, which is logged at Error. ctx ends ApplyTimeout after the call,
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
	for total < size && ctx.Err() == nil && time.Now().Before(settleBy) && (total == 0 || time.Since(start) < TxApplierRounds) {
		n, err := r.txRound(ctx, tx, size-total, settleBy)
		total += n
		if err != nil {
			return total, fmt.Errorf("the batch's transaction was rolled back, its %d rows will be claimed again: %w", total, err)
		}
		if n == 0 {
			break
		}
	}
	// Like lockBatch, an empty claim may have written (woken parked heads): commit it too.
	wctx, cancel := context.WithDeadline(context.WithoutCancel(ctx), later(settleBy.Add(LeaseMargin), time.Now().Add(LeaseMargin)))
	defer cancel()
	if err := tx.Commit(wctx); err != nil {
		return total, r.lockTxEnded(translate("committing batch", err), total)
	}
	for range total {
		r.metrics.recorded(DispositionSent)
	}
	return total, nil
}

// txRound claims up to n rows in tx, applies them with the TxApplier and settles them as sent.
func (r *runner[T]) txRound(ctx context.Context, tx pgx.Tx, n int, settleBy time.Time) (int, error) {
	start := time.Now()
	cctx, cancel := r.bounded(ctx)
	jobs, err := queryClaimLocked(cctx, tx, r.reg.queue, n, r.cfg.RunLength, lockIdleBound(r.cfg.LockTransactionTimeout))
	cancel()
	if err != nil {
		return 0, err
	}
	r.claimed(start, jobs, n)
	if len(jobs) == 0 {
		return 0, nil
	}
	r.metrics.observeClaim(ClaimLock, time.Since(start))
	batch := make([]TxEvent, len(jobs))
	for i, j := range jobs {
		batch[i] = TxEvent{Event: j.event, Payload: j.payload}
	}
	deadline := time.Now().Add(r.cfg.ApplyTimeout)
	if settleBy.Before(deadline) {
		deadline = settleBy
	}
	actx, cancel := context.WithDeadline(context.WithoutCancel(ctx), deadline)
	err = r.callTxApplier(ctx, actx, tx, batch, deadline)
	cancel()
	if err != nil {
		return len(jobs), fmt.Errorf("applying the batch in its transaction: %w", err)
	}
	sctx, cancel := context.WithDeadline(context.WithoutCancel(ctx), settleBy.Add(LeaseMargin))
	defer cancel()
	settled, err := querySettleLocked(sctx, tx, r.reg.queue, jobs) // every job's disposition is DispositionSent
	if err != nil {
		return len(jobs), err
	}
	if settled != int64(len(jobs)) {
		return len(jobs), fmt.Errorf("settle_locked recorded %d of %d rows", settled, len(jobs))
	}
	return len(jobs), nil
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
		r.d.logger.ErrorContext(ctx, "the TxApplier panicked; its batch is rolled back and claimed again",
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
