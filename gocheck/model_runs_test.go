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

	// Each key's rows in the order returned (id order within a key): the first is its head, each
	// other the key's next deliverable event after the one before it.
	var runs [][]*modelEvent
	last := map[string]int{} // key -> index in runs
	for _, c := range claimed {
		at := c.until.Add(-lease)
		if at.Before(before) && !r.cfg.skip["time"] {
			r.fail("time", "claim_runs(%s, lease %s) called at %s leased id=%d m=%d until %s: shorter than asked",
				q.name, lease, before.Format("15:04:05.000000"), c.id, c.m, c.until.Format("15:04:05.000000"))
		}
		i, inRun := last[c.key]
		if !q.partitioned() || !inRun {
			e := r.checkClaim(q, c, at, "claim_runs")
			r.model.lease(e, c.token, c.until)
			last[c.key] = len(runs)
			runs = append(runs, []*modelEvent{e})
			continue
		}
		prev := runs[i][len(runs[i])-1]
		e := r.checkRunClaim(q, c, at, prev)
		r.model.lease(e, c.token, c.until)
		runs[i] = append(runs[i], e)
	}
	for _, run := range runs {
		r.note("%s;", modelEventList(run))
		r.applyRun(q, run)
	}
}

// checkRunClaim checks a row that a run claim returned after prev, a row of the same key in the
// same claim: a known event, due at at, and the key's next deliverable event after prev in commit
// order (poisoned events are stepped over, as the FIFO rule does).
func (r *modelRun) checkRunClaim(q *modelQueue, c modelClaimed, at time.Time, prev *modelEvent) *modelEvent {
	r.t.Helper()
	e := r.model.events[c.m]
	if e == nil || e.queue != q {
		r.fail("nothing-lost", "claim_runs on %s returned id=%d m=%d, an event the model does not have", q.name, c.id, c.m)
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
		r.fail("claim-rules", "claim_runs on %s returned %v in a run after %v, but it is sent or poisoned", q.name, e, prev)
	case !e.dueAt(at):
		r.fail("claim-rules", "claim_runs on %s returned %v in a run, but it is not due at %s (leased or backing off)",
			q.name, e, at.Format("15:04:05.000000"))
	case next != e:
		r.fail("commit-order", "claim_runs on %s returned %v after %v in a run, but the key's next deliverable event is %v;"+
			" the key's events:%s", q.name, e, prev, next, r.model.describeKey(q, e.key))
	}
	if c.key != e.key || c.attempts != e.attempts {
		r.fail("nothing-lost", "claim_runs on %s returned m=%d with key %q and attempt_count %d, the model has %v",
			q.name, c.m, c.key, c.attempts, e)
	}
	return e
}

// applyRun applies a run in order as the Go drainer does: sent until the first failure, which is
// recorded; the rest are given back, or held.
func (r *modelRun) applyRun(q *modelQueue, run []*modelEvent) {
	var results []*modelEvent
	var outcomes []string
	stop := len(run)
	for i, e := range run {
		x := r.rng.IntN(100)
		if x < 70 {
			results, outcomes = append(results, e), append(outcomes, "sent")
			continue
		}
		if x < 85 {
			results, outcomes = append(results, e), append(outcomes, "transient")
		} else if x < 90 {
			results, outcomes = append(results, e), append(outcomes, "permanent")
		}
		stop = i + 1
		if x >= 90 {
			stop = i // the worker died: this row and the rest stay held
		}
		break
	}
	r.applyResults(q, results, outcomes)
	if stop < len(run) && r.rng.IntN(3) > 0 {
		for _, e := range run[stop:] {
			r.release(e)
		}
	}
}
