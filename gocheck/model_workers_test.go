package gocheck

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// Worker steps of TestModel, all as a login role granted only pgdrain_worker: claims in lease mode
// (claim_batch, then apply_result(s), extend_lease, release) and in lock mode (claim_locked and
// settle_locked in one transaction).

// modelQuerier is a connection or an open transaction.
type modelQuerier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// modelClaimed is one row a claim returned.
type modelClaimed struct {
	id       int64
	m        int
	key      string
	attempts int
	token    string    // lease mode only
	until    time.Time // lease mode only
}

// modelLeases are the leases the steps ask for: short, so held rows come back soon.
var modelLeases = []time.Duration{30 * time.Millisecond, 60 * time.Millisecond, 120 * time.Millisecond, 250 * time.Millisecond}

func modelInterval(d time.Duration) string { return fmt.Sprintf("%d microseconds", d.Microseconds()) }

// dbNow is the server's clock now (not the transaction's start).
func (r *modelRun) dbNow(q modelQuerier) time.Time {
	var now time.Time
	r.noErr(q.QueryRow(r.ctx, "SELECT clock_timestamp()").Scan(&now), "reading clock_timestamp()")
	return now
}

// claimBatch calls claim_batch and returns its rows.
func (r *modelRun) claimBatch(q modelQuerier, queue *modelQueue, batch int, lease time.Duration) ([]modelClaimed, error) {
	return collectLeased(q.Query(r.ctx, `SELECT id, COALESCE((payload->>'m')::int, -1), COALESCE(partition_key, ''),
		attempt_count, lease_token::text, leased_until FROM outbox.claim_batch($1, $2, $3::interval)`,
		queue.name, batch, modelInterval(lease)))
}

// collectLeased reads the rows of a lease-mode claim (id, m, key, attempts, token, until).
func collectLeased(rows pgx.Rows, err error) ([]modelClaimed, error) {
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (modelClaimed, error) {
		var c modelClaimed
		return c, row.Scan(&c.id, &c.m, &c.key, &c.attempts, &c.token, &c.until)
	})
}

// claimLocked calls claim_locked in the open transaction q and returns its rows.
func (r *modelRun) claimLocked(q modelQuerier, queue *modelQueue, batch int) ([]modelClaimed, error) {
	return collectLocked(q.Query(r.ctx, `SELECT id, COALESCE((payload->>'m')::int, -1), COALESCE(partition_key, ''), attempt_count
		FROM outbox.claim_locked($1, $2)`, queue.name, batch))
}

// collectLocked reads the rows of a lock-mode claim (id, m, key, attempts).
func collectLocked(rows pgx.Rows, err error) ([]modelClaimed, error) {
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (modelClaimed, error) {
		var c modelClaimed
		return c, row.Scan(&c.id, &c.m, &c.key, &c.attempts)
	})
}

// checkClaim checks that a claim at time at (the claim's now()) could return c: a known, unsent,
// unpoisoned, due event, on a partitioned queue its key's first in commit order, with the
// attempts and key the model has. It returns the event.
func (r *modelRun) checkClaim(q *modelQueue, c modelClaimed, at time.Time, where string) *modelEvent {
	r.t.Helper()
	e := r.model.events[c.m]
	if e == nil || e.queue != q {
		r.fail("nothing-lost", "%s on %s returned id=%d m=%d, an event the model does not have (rolled back, truncated, purged or never written)",
			where, q.name, c.id, c.m)
	}
	e.id = c.id
	if invariant, why := r.model.whyNotClaimable(e, at); why != "" {
		r.fail(invariant, "%s on %s at %s returned %v, but %s; the key's events:%s",
			where, q.name, at.Format("15:04:05.000000"), e, why, r.model.describeKey(q, e.key))
	}
	if c.key != e.key || c.attempts != e.attempts {
		r.fail("nothing-lost", "%s on %s returned m=%d with key %q and attempt_count %d, the model has %v",
			where, q.name, c.m, c.key, c.attempts, e)
	}
	return e
}

// stepClaimLease: a drainer in lease mode.
func (r *modelRun) stepClaimLease() { r.claimLease(r.randomQueue(), false) }

// stepClaimLeaseInOldTransaction: claim_batch in a transaction that began a while ago; the lease
// must still be as long as asked, counted from the claim.
func (r *modelRun) stepClaimLeaseInOldTransaction() { r.claimLease(r.randomQueue(), true) }

// claimLease claims a batch in lease mode, checks every row against the model, and does something
// with each: records an outcome, releases it, extends its lease, or keeps holding it.
func (r *modelRun) claimLease(q *modelQueue, inOldTransaction bool) {
	lease := modelLeases[r.rng.IntN(len(modelLeases))]
	batch := 1 + r.rng.IntN(12)
	var claimed []modelClaimed
	var before time.Time
	var err error
	if inOldTransaction {
		tx, txErr := r.worker.Begin(r.ctx)
		r.noErr(txErr, "BEGIN")
		pause := time.Duration(10+r.rng.IntN(30)) * time.Millisecond
		time.Sleep(pause)
		before = r.dbNow(tx)
		claimed, err = r.claimBatch(tx, q, batch, lease)
		r.noErr(err, "claim_batch(%s, %d, %s) in an older transaction", q.name, batch, lease)
		r.noErr(tx.Commit(r.ctx), "COMMIT")
		r.note("BEGIN; (%s later) claim_batch(%s, %d, %s); COMMIT ->", pause, q.name, batch, lease)
	} else {
		before = r.dbNow(r.worker)
		claimed, err = r.claimBatch(r.worker, q, batch, lease)
		r.noErr(err, "claim_batch(%s, %d, %s)", q.name, batch, lease)
		r.note("claim_batch(%s, %d, %s) ->", q.name, batch, lease)
	}
	for _, c := range claimed {
		if at := c.until.Add(-lease); at.Before(before) && !r.cfg.skip["time"] {
			r.fail("time", "claim_batch(%s, lease %s) called at %s leased id=%d m=%d until %s: %s shorter than asked "+
				"(the lease is counted from the transaction's start, not from the claim)",
				q.name, lease, before.Format("15:04:05.000000"), c.id, c.m, c.until.Format("15:04:05.000000"), before.Sub(at))
		}
	}
	r.leaseClaimed(q, claimed, lease, "claim_batch")
}

// dispose decides, for each freshly leased event, what the worker does with it.
func (r *modelRun) dispose(q *modelQueue, events []*modelEvent) {
	var results []*modelEvent
	var outcomes []string
	for _, e := range events {
		switch x := r.rng.IntN(100); {
		case x < 45:
			results, outcomes = append(results, e), append(outcomes, "sent")
		case x < 60:
			results, outcomes = append(results, e), append(outcomes, "transient")
		case x < 67:
			results, outcomes = append(results, e), append(outcomes, "permanent")
		case x < 75:
			r.release(e)
		case x < 82:
			r.extend(e)
		default:
			r.note("hold m%d;", e.m)
		}
	}
	r.applyResults(q, results, outcomes)
}

// applyResults records outcomes for leases the model holds, with apply_results in one call or
// apply_result one by one. Every token is the current one, so every result must be applied.
func (r *modelRun) applyResults(q *modelQueue, events []*modelEvent, outcomes []string) {
	if len(events) == 0 {
		return
	}
	ids := make([]int64, len(events))
	tokens := make([]string, len(events))
	errs := make([]*string, len(events))
	for i, e := range events {
		ids[i], tokens[i] = e.id, e.lease.token
		if outcomes[i] != "sent" {
			msg := fmt.Sprintf("model: %s", outcomes[i])
			errs[i] = &msg
		}
	}
	before := r.dbNow(r.worker)
	if r.rng.IntN(2) == 0 {
		rows, err := r.worker.Query(r.ctx, `SELECT applied FROM outbox.apply_results($1, $2::bigint[],
			$3::text[]::uuid[], $4::text[], $5::text[])`, q.name, ids, tokens, outcomes, errs)
		r.noErr(err, "apply_results(%s, %v, ..., %v)", q.name, ids, outcomes)
		applied, err := pgx.CollectRows(rows, pgx.RowTo[bool])
		r.noErr(err, "apply_results(%s, %v, ..., %v)", q.name, ids, outcomes)
		for i, ok := range applied {
			r.requireApplied(ok, "apply_results", events[i])
		}
		r.note("apply_results(%v, %v);", modelMs(events), outcomes)
	} else {
		for i, e := range events {
			var ok bool
			r.noErr(r.worker.QueryRow(r.ctx, `SELECT outbox.apply_result($1, $2, $3::text::uuid, $4, $5)`,
				q.name, e.id, tokens[i], outcomes[i], errs[i]).Scan(&ok), "apply_result(%s, %d)", q.name, e.id)
			r.requireApplied(ok, "apply_result", e)
		}
		r.note("apply_result(%v, %v);", modelMs(events), outcomes)
	}
	after := r.dbNow(r.worker)
	for i, e := range events {
		r.model.record(e, outcomes[i], before, after)
	}
}

func (r *modelRun) requireApplied(applied bool, fn string, e *modelEvent) {
	if !applied {
		r.fail("fencing", "%s refused the current token of %v: the lease the model holds was lost", fn, e)
	}
}

func modelMs(events []*modelEvent) []string {
	out := make([]string, len(events))
	for i, e := range events {
		out[i] = fmt.Sprintf("m%d", e.m)
	}
	return out
}

// release gives a held row back; it must be claimable at once.
func (r *modelRun) release(e *modelEvent) {
	var ok bool
	r.noErr(r.worker.QueryRow(r.ctx, `SELECT outbox.release($1, $2, $3::text::uuid)`, e.queue.name, e.id, e.lease.token).Scan(&ok),
		"release(%s, %d)", e.queue.name, e.id)
	r.requireApplied(ok, "release", e)
	r.model.dropLease(e)
	r.note("release m%d;", e.m)
}

// extend moves a held lease; it must end a full lease after the call.
func (r *modelRun) extend(e *modelEvent) {
	lease := modelLeases[r.rng.IntN(len(modelLeases))]
	before := r.dbNow(r.worker)
	var until *time.Time
	r.noErr(r.worker.QueryRow(r.ctx, `SELECT outbox.extend_lease($1, $2, $3::text::uuid, $4::interval)`,
		e.queue.name, e.id, e.lease.token, modelInterval(lease)).Scan(&until), "extend_lease(%s, %d)", e.queue.name, e.id)
	if until == nil {
		r.fail("fencing", "extend_lease refused the current token of %v", e)
	}
	if until.Before(before.Add(lease)) && !r.cfg.skip["time"] {
		r.fail("time", "extend_lease(%s, lease %s) called at %s extended m=%d only until %s",
			e.queue.name, lease, before.Format("15:04:05.000000"), e.m, until.Format("15:04:05.000000"))
	}
	e.lease.until = *until
	r.note("extend m%d by %s;", e.m, lease)
}

// stepSettleHeld: results for leases held since an earlier step, perhaps expired meanwhile (an
// expired lease nobody re-claimed is still ours: the token decides).
func (r *modelRun) stepSettleHeld() {
	held := r.model.leased()
	r.rng.Shuffle(len(held), func(i, j int) { held[i], held[j] = held[j], held[i] })
	byQueue := map[*modelQueue][]*modelEvent{}
	for _, e := range held[:min(len(held), 1+r.rng.IntN(4))] {
		byQueue[e.queue] = append(byQueue[e.queue], e)
	}
	for _, q := range r.model.queues {
		events := byQueue[q]
		outcomes := make([]string, len(events))
		for i := range events {
			outcomes[i] = []string{"sent", "sent", "sent", "transient", "permanent"}[r.rng.IntN(5)]
		}
		r.applyResults(q, events, outcomes)
	}
	if len(held) == 0 {
		r.note("no lease held")
	}
}

// stepExtendOrRelease: a heartbeat or a give-back on a lease held since an earlier step.
func (r *modelRun) stepExtendOrRelease() {
	held := r.model.leased()
	if len(held) == 0 {
		r.note("no lease held")
		return
	}
	e := held[r.rng.IntN(len(held))]
	if r.rng.IntN(2) == 0 {
		r.extend(e)
	} else {
		r.release(e)
	}
}

// stepClaimLock: a drainer in lock mode: claim_locked, deliver, settle_locked, in one transaction.
func (r *modelRun) stepClaimLock() { r.claimLock(r.randomQueue(), false) }

// stepClaimLockInSavepoint: the same through a driver that wraps statements in savepoints
// (PgJDBC autosave, nested atomic blocks): claim_locked runs inside a savepoint, usually released,
// sometimes rolled back.
func (r *modelRun) stepClaimLockInSavepoint() {
	q := r.randomQueue()
	if r.rng.IntN(3) == 0 {
		r.claimLockUndone(q)
		return
	}
	r.claimLock(q, true)
}

// claimLockUndone: claim_locked in a savepoint that is then rolled back, which gives the row locks
// back: settle_locked must refuse the rows (55000), and they stay as they were.
func (r *modelRun) claimLockUndone(q *modelQueue) {
	tx, err := r.worker.Begin(r.ctx)
	r.noErr(err, "BEGIN")
	defer func() { _ = tx.Rollback(r.ctx) }()
	r.note("BEGIN;")
	r.txExec(tx, "SAVEPOINT claim")
	claimed, err := r.claimLocked(tx, q, 1+r.rng.IntN(6))
	r.noErr(err, "claim_locked(%s)", q.name)
	at := r.dbNow(tx)
	events := make([]*modelEvent, len(claimed))
	for i, c := range claimed {
		events[i] = r.checkClaim(q, c, at, "claim_locked")
	}
	r.note("claim_locked(%s) -> %s;", q.name, modelEventList(events))
	r.txExec(tx, "ROLLBACK TO SAVEPOINT claim")
	if len(events) > 0 {
		r.txExec(tx, "SAVEPOINT settle")
		outcomes := make([]string, len(events))
		for i := range outcomes {
			outcomes[i] = "sent"
		}
		_, err = tx.Exec(r.ctx, `SELECT outbox.settle_locked($1, $2::bigint[], $3::text[])`, q.name, modelIDs(events), outcomes)
		if code, _ := sqlState(err); code != "55000" {
			r.fail("claim-rules", "settle_locked(%s, %v) of rows whose claim was rolled back to a savepoint: want 55000, got %v",
				q.name, modelIDs(events), err)
		}
		r.note("settle_locked(%v) refused (55000);", modelMs(events))
		r.txExec(tx, "ROLLBACK TO SAVEPOINT settle")
	}
	r.noErr(tx.Commit(r.ctx), "COMMIT")
	r.note("COMMIT")
}

func (r *modelRun) claimLock(q *modelQueue, inSavepoint bool) {
	batch := 1 + r.rng.IntN(12)
	tx, err := r.worker.Begin(r.ctx)
	r.noErr(err, "BEGIN")
	defer func() { _ = tx.Rollback(r.ctx) }()
	r.note("BEGIN;")
	if inSavepoint {
		r.txExec(tx, "SAVEPOINT claim")
	}
	claimed, err := r.claimLocked(tx, q, batch)
	r.noErr(err, "claim_locked(%s, %d)", q.name, batch)
	at := r.dbNow(tx) // the claim saw the rows at this time or earlier
	events := make([]*modelEvent, len(claimed))
	for i, c := range claimed {
		events[i] = r.checkClaim(q, c, at, "claim_locked")
	}
	r.note("claim_locked(%s, %d) -> %s;", q.name, batch, modelEventList(events))
	if inSavepoint {
		r.txExec(tx, "RELEASE SAVEPOINT claim")
	}
	time.Sleep(time.Duration(r.rng.IntN(8)) * time.Millisecond) // delivering
	settled, outcomes := r.lockOutcomes(events)
	before := r.settleLocked(tx, q, settled, outcomes)
	after := r.dbNow(tx)
	if r.rng.IntN(10) == 0 {
		r.noErr(tx.Rollback(r.ctx), "ROLLBACK")
		r.note("ROLLBACK (the worker died: nothing is recorded)")
		return
	}
	r.noErr(tx.Commit(r.ctx), "COMMIT")
	r.note("COMMIT")
	for i, e := range settled {
		r.model.record(e, outcomes[i], before, after)
	}
}

// lockOutcomes picks an outcome for most claimed rows; the others stay unsettled (their lock ends
// with the transaction and they are unchanged).
func (r *modelRun) lockOutcomes(events []*modelEvent) ([]*modelEvent, []string) {
	var settled []*modelEvent
	var outcomes []string
	for _, e := range events {
		outcome := ""
		switch x := r.rng.IntN(100); {
		case x < 60:
			outcome = "sent"
		case x < 75:
			outcome = "transient"
		case x < 90:
			outcome = "permanent"
		default:
			continue
		}
		settled, outcomes = append(settled, e), append(outcomes, outcome)
	}
	return settled, outcomes
}

// settleLocked records outcomes in lock mode; every row must be accepted. It returns the clock
// just before the call, from which a backoff must be counted.
func (r *modelRun) settleLocked(tx pgx.Tx, q *modelQueue, events []*modelEvent, outcomes []string) time.Time {
	before := r.dbNow(tx)
	if len(events) == 0 {
		return before
	}
	var n int64
	r.noErr(tx.QueryRow(r.ctx, `SELECT outbox.settle_locked($1, $2::bigint[], $3::text[])`,
		q.name, modelIDs(events), outcomes).Scan(&n), "settle_locked(%s, %v, %v)", q.name, modelIDs(events), outcomes)
	if int(n) != len(events) {
		r.fail("nothing-lost", "settle_locked(%s, %v, %v) recorded %d rows, want %d", q.name, modelIDs(events), outcomes, n, len(events))
	}
	r.note("settle_locked(%v, %v);", modelMs(events), outcomes)
	return before
}

func (r *modelRun) txExec(tx pgx.Tx, sql string) {
	_, err := tx.Exec(r.ctx, sql)
	r.noErr(err, "%s", sql)
	r.note("%s;", sql)
}

func modelIDs(events []*modelEvent) []int64 {
	ids := make([]int64, len(events))
	for i, e := range events {
		ids[i] = e.id
	}
	return ids
}
