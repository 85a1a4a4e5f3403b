package gocheck

import "time"

// stepClaimLeaseRuns: a drainer in lease mode that claims runs (claim_runs, issue 28): with each
// key's head, the events after it in commit order, up to run_length per key. It applies each run
// in order and stops at its first failure: the rest of that run is given back, or held (a worker
// that died with them).
func (r *modelRun) stepClaimLeaseRuns() {
	q := r.randomQueue()
	lease := modelLeases[r.rng.IntN(len(modelLeases))]
	batch, runLength := 1+r.rng.IntN(12), 1+r.rng.IntN(4)
	before := r.dbNow(r.worker)
	claimed, err := collectLeased(r.worker.Query(r.ctx, `SELECT id, COALESCE((payload->>'m')::int, -1),
		COALESCE(partition_key, ''), attempt_count, lease_token::text, leased_until
		FROM outbox.claim_runs($1, $2, $3::interval, $4)`, q.name, batch, modelInterval(lease), runLength))
	r.noErr(err, "claim_runs(%s, %d, %s, %d)", q.name, batch, lease, runLength)
	r.note("claim_runs(%s, %d, %s, %d) ->", q.name, batch, lease, runLength)

	runs := r.claimedRuns(q, claimed, "claim_runs", func(c modelClaimed) time.Time {
		at := c.until.Add(-lease)
		if at.Before(before) && !r.cfg.skip["time"] {
			r.fail("time", "claim_runs(%s, lease %s) called at %s leased id=%d m=%d until %s: shorter than asked",
				q.name, lease, before.Format("15:04:05.000000"), c.id, c.m, c.until.Format("15:04:05.000000"))
		}
		return at
	}, func(e *modelEvent, c modelClaimed) { r.model.lease(e, c.token, c.until) })
	for _, run := range runs {
		r.note("%s;", modelEventList(run))
		r.applyRun(q, run)
	}
}

// claimedRuns checks the rows of a run claim (where: the function) and groups them into runs, each
// key's rows in the order returned (id order within a key): the first is its head (checkClaim),
// each other the key's next deliverable event after the one before it (checkRunClaim). at is when
// the claim saw a row; take notes a checked row as claimed.
func (r *modelRun) claimedRuns(q *modelQueue, claimed []modelClaimed, where string, at func(modelClaimed) time.Time,
	take func(*modelEvent, modelClaimed)) [][]*modelEvent {
	var runs [][]*modelEvent
	last := map[string]int{} // key -> index in runs
	for _, c := range claimed {
		seen := at(c)
		i, inRun := last[c.key]
		if !q.partitioned() || !inRun {
			e := r.checkClaim(q, c, seen, where)
			take(e, c)
			last[c.key] = len(runs)
			runs = append(runs, []*modelEvent{e})
			continue
		}
		prev := runs[i][len(runs[i])-1]
		e := r.checkRunClaim(q, c, seen, prev, where)
		take(e, c)
		runs[i] = append(runs[i], e)
	}
	return runs
}

// stepClaimLockRuns: a drainer in lock mode that claims runs (claim_locked_runs, issue 28), in one
// transaction: it applies each run in order and settles what it applied, up to and including the
// run's first failure; the rest of that run stays unsettled (unchanged when the transaction ends).
// Sometimes the worker dies before COMMIT: nothing is recorded.
func (r *modelRun) stepClaimLockRuns() {
	q := r.randomQueue()
	batch, runLength := 1+r.rng.IntN(12), 1+r.rng.IntN(4)
	tx, err := r.worker.Begin(r.ctx)
	r.noErr(err, "BEGIN")
	defer func() { _ = tx.Rollback(r.ctx) }()
	r.note("BEGIN;")
	claimed, err := collectLocked(tx.Query(r.ctx, `SELECT id, COALESCE((payload->>'m')::int, -1), COALESCE(partition_key, ''),
		attempt_count FROM outbox.claim_locked_runs($1, $2, $3)`, q.name, batch, runLength))
	r.noErr(err, "claim_locked_runs(%s, %d, %d)", q.name, batch, runLength)
	at := r.dbNow(tx) // the claim saw the rows at this time or earlier
	runs := r.claimedRuns(q, claimed, "claim_locked_runs", func(modelClaimed) time.Time { return at },
		func(*modelEvent, modelClaimed) {})
	r.note("claim_locked_runs(%s, %d, %d) ->", q.name, batch, runLength)
	var settled []*modelEvent
	var outcomes []string
	for _, run := range runs {
		r.note("%s;", modelEventList(run))
		results, picked, _ := r.runOutcomes(run)
		settled, outcomes = append(settled, results...), append(outcomes, picked...)
	}
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

// checkRunClaim checks a row that a run claim returned after prev, a row of the same key in the
// same claim: a known event, due at at, and the key's next deliverable event after prev in commit
// order (poisoned events are stepped over, as the FIFO rule does).
func (r *modelRun) checkRunClaim(q *modelQueue, c modelClaimed, at time.Time, prev *modelEvent, where string) *modelEvent {
	r.t.Helper()
	e := r.model.events[c.m]
	if e == nil || e.queue != q {
		r.fail("nothing-lost", "%s on %s returned id=%d m=%d, an event the model does not have", where, q.name, c.id, c.m)
	}
	e.id = c.id
	var next *modelEvent
	passed := false
	for _, x := range r.model.eventsOf(q, &prev.key) {
		if x == prev {
			passed = true
			continue
		}
		if passed && x.deliverable() {
			next = x
			break
		}
	}
	switch {
	case !e.deliverable():
		r.fail("claim-rules", "%s on %s returned %v in a run after %v, but it is sent or poisoned", where, q.name, e, prev)
	case !e.dueAt(at):
		r.fail("claim-rules", "%s on %s returned %v in a run, but it is not due at %s (leased or backing off)",
			where, q.name, e, at.Format("15:04:05.000000"))
	case next != e:
		r.fail("commit-order", "%s on %s returned %v after %v in a run, but the key's next deliverable event is %v;"+
			" the key's events:%s", where, q.name, e, prev, next, r.model.describeKey(q, e.key))
	}
	if c.key != e.key || c.attempts != e.attempts {
		r.fail("nothing-lost", "%s on %s returned m=%d with key %q and attempt_count %d, the model has %v",
			where, q.name, c.m, c.key, c.attempts, e)
	}
	return e
}

// runOutcomes applies a run in order as the Go drainer does: its rows up to and including the first
// failure get an outcome (sent, then transient or permanent); sometimes the worker dies first. It
// returns the rows with outcomes, their outcomes, and where the rows without one start.
func (r *modelRun) runOutcomes(run []*modelEvent) ([]*modelEvent, []string, int) {
	var results []*modelEvent
	var outcomes []string
	for i, e := range run {
		x := r.rng.IntN(100)
		switch {
		case x < 70:
			results, outcomes = append(results, e), append(outcomes, "sent")
			continue
		case x < 85:
			results, outcomes = append(results, e), append(outcomes, "transient")
		case x < 90:
			results, outcomes = append(results, e), append(outcomes, "permanent")
		default:
			return results, outcomes, i // the worker died: this row and the rest have none
		}
		return results, outcomes, i + 1
	}
	return results, outcomes, len(run)
}

// applyRun applies a run in order as the Go drainer does: sent until the first failure, which is
// recorded; the rest are given back, or held.
func (r *modelRun) applyRun(q *modelQueue, run []*modelEvent) {
	results, outcomes, stop := r.runOutcomes(run)
	r.applyResults(q, results, outcomes)
	if stop < len(run) && r.rng.IntN(3) > 0 {
		for _, e := range run[stop:] {
			r.release(e)
		}
	}
}
