package gocheck

import (
	"slices"
	"sync"
	"time"
)

// Steps of TestModel where two sessions really run at the same time. Their outcome may depend on
// which one the server serves first, so each is written to be checked whatever the order: the
// model is updated once both are done, with what holds in either order.

// stepClaimRacingCommit: a claim runs while a producer commits (issue 11, 2a: heads rebuilt by a
// claim while the commit step of the same key runs). The producer's rows go to the tail of their
// keys, so whether or not the claim saw them, what it returned must be right for the model after
// the commit.
func (r *modelRun) stepClaimRacingCommit() {
	q := r.randomPartitionedQueue()
	p := r.beginProducer(r.randomProducer(), "P", "")
	p.write(q, 1+r.rng.IntN(3), nil)
	lease := modelLeases[r.rng.IntN(len(modelLeases))]
	var claimed []modelClaimed
	var claimErr error
	var wg sync.WaitGroup
	wg.Go(func() { claimed, claimErr = r.claimBatch(r.racer, q, 20, lease) })
	p.commit()
	wg.Wait()
	r.noErr(claimErr, "claim_batch(%s) racing a commit", q.name)
	r.note("racing claim_batch(%s, 20, %s) ->", q.name, lease)
	r.leaseClaimed(q, claimed, lease, "claim_batch racing a commit")
}

// stepClaimRacingClaim: two workers claim the same queue at once. SKIP LOCKED must give each row
// to one of them only, and both must follow the rules.
func (r *modelRun) stepClaimRacingClaim() {
	q := r.randomQueue()
	lease := modelLeases[r.rng.IntN(len(modelLeases))]
	var mine, theirs []modelClaimed
	var myErr, theirErr error
	theirBatch := 1 + r.rng.IntN(8)
	var wg sync.WaitGroup
	wg.Go(func() { theirs, theirErr = r.claimBatch(r.racer, q, theirBatch, lease) })
	mine, myErr = r.claimBatch(r.worker, q, 8, lease)
	wg.Wait()
	r.noErr(myErr, "claim_batch(%s)", q.name)
	r.noErr(theirErr, "claim_batch(%s) racing another", q.name)
	// In claim order: a row both returned is fine only when the first lease had ended by the second
	// claim (a busy machine can delay one claim by more than a short lease).
	all := append(append([]modelClaimed(nil), mine...), theirs...)
	slices.SortStableFunc(all, func(a, b modelClaimed) int { return a.until.Compare(b.until) })
	first := map[int]modelClaimed{}
	for _, c := range all {
		if f, ok := first[c.m]; ok && c.until.Add(-lease).Before(f.until) {
			r.fail("claim-rules", "two concurrent claim_batch(%s) both returned m=%d, the second while the first's lease (until %s) was live",
				q.name, c.m, f.until.Format("15:04:05.000000"))
		}
		first[c.m] = c
	}
	r.note("two claim_batch(%s, .., %s) at once ->", q.name, lease)
	r.leaseClaimed(q, all, lease, "claim_batch racing another")
}

// stepRequeueRacingResult: requeue_poisoned of a key runs while a result for the key's held row is
// recorded (issue 11, 2b). The result is sent or transient (neither poisons on a partitioned
// queue), so what the requeue finds does not depend on the order.
func (r *modelRun) stepRequeueRacingResult() {
	q := r.randomPartitionedQueue()
	var held *modelEvent // not poisoned: the requeue must not race for it
	for _, e := range r.model.leased() {
		if e.queue == q && !e.poisoned() && held == nil {
			held = e
		}
	}
	if held == nil {
		r.note("no lease held on %s:", q.name)
		r.claimLease(q, false)
		return
	}
	poisoned := r.model.poisonedOf(q)
	var sameKey []*modelEvent
	for _, e := range poisoned {
		if e.key == held.key {
			sameKey = append(sameKey, e)
		}
	}
	if len(sameKey) > 0 {
		poisoned = sameKey
	}
	outcome := []string{"sent", "transient"}[r.rng.IntN(2)]
	var requeued int64
	var requeueErr error
	before := r.dbNow(r.worker)
	var wg sync.WaitGroup
	wg.Go(func() {
		requeueErr = r.operator.QueryRow(r.ctx, `SELECT outbox.requeue_poisoned($1, $2::bigint[])`,
			q.name, modelIDs(poisoned)).Scan(&requeued)
	})
	var applied bool
	err := r.worker.QueryRow(r.ctx, `SELECT outbox.apply_result($1, $2, $3::text::uuid, $4)`,
		q.name, held.id, held.lease.token, outcome).Scan(&applied)
	wg.Wait()
	after := r.dbNow(r.worker)
	r.noErr(err, "apply_result(%s, %d) racing a requeue", q.name, held.id)
	r.noErr(requeueErr, "requeue_poisoned(%s, %v) racing a result", q.name, modelIDs(poisoned))
	r.note("requeue_poisoned(%s, %v) = %d while apply_result(m%d, %s);", q.name, modelIDs(poisoned), requeued,
		held.m, outcome)
	r.requireApplied(applied, "apply_result", held)
	if int(requeued) != len(poisoned) {
		r.fail("nothing-lost", "requeue_poisoned(%s, %v) requeued %d rows, the model has %d poisoned: %s",
			q.name, modelIDs(poisoned), requeued, len(poisoned), modelEventList(poisoned))
	}
	r.model.record(held, outcome, before, after)
	r.model.requeue(poisoned)
}

// leaseClaimed checks rows a lease-mode claim returned, records their leases and disposes of them.
// An event claimed twice (the first lease ran out) is disposed of once, under the latest lease.
func (r *modelRun) leaseClaimed(q *modelQueue, claimed []modelClaimed, lease time.Duration, where string) {
	var events []*modelEvent
	for _, c := range claimed {
		e := r.checkClaim(q, c, c.until.Add(-lease), where)
		r.model.lease(e, c.token, c.until)
		if !slices.Contains(events, e) {
			events = append(events, e)
		}
	}
	r.note("%s;", modelEventList(events))
	r.dispose(q, events)
}
