package gocheck

import (
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// The invariants TestModel checks. Each failure names its invariant:
//
//	nothing-lost     the table holds exactly the model's events, each sent, pending or poisoned
//	                 with the attempts the model expects (also: stats, requeue and purge counts,
//	                 results under a live token accepted)
//	nothing-stuck    one claim cycle returns every due deliverable event (per key: the first);
//	                 no backoff runs past backoff_max
//	commit-order     a claim returns only a key's first deliverable event in commit order, and
//	                 pending rows' ids follow commit order per key
//	stale-token      a result, extension or release under a stale token changes nothing
//	fencing          lease and token are set and cleared together, and are the holder's
//	claim-rules      a claim returns no sent, poisoned, leased or backing-off row, none twice
//	no-repair        outbox.repair (dry run) finds nothing to repair in the derived state: a
//	                 repair is a bug that became a delay (docs/ordering.md)
//	time             leases and backoffs are counted from the call, not from an older
//	                 transaction's start
//	least-privilege  a producer can not write what steers delivery, nor an event the rules refuse
//
// The first five run after every step; the others where their steps happen.

// modelRow is one row of a queue table as the checks read it (as the owner).
type modelRow struct {
	id          int64
	m           int
	key         string
	attempts    int
	sent        bool
	next        *time.Time
	leasedUntil *time.Time
	token       *string
}

func (r *modelRun) checkInvariants() {
	for _, q := range r.model.queues {
		at, rows := r.readTable(q)
		r.checkNothingLost(q, rows, at)
		r.checkIDsFollowCommitOrder(q)
		r.checkNoRepairNeeded(q)
		r.checkNothingStuck(q, at)
	}
	r.checkStaleToken()
	for _, name := range []string{"nothing-lost", "commit-order", "nothing-stuck", "stale-token", "no-repair"} {
		r.checks[name]++
	}
}

// readTable returns every row of q and a time at which they were all already in this state.
func (r *modelRun) readTable(q *modelQueue) (time.Time, []modelRow) {
	at := r.dbNow(r.owner)
	key := "''"
	if q.partitioned() {
		key = pgx.Identifier{q.keyColumn}.Sanitize() + "::text"
	}
	rows, err := r.owner.Query(r.ctx, fmt.Sprintf(`SELECT id, COALESCE((payload->>'m')::int, -1), %s, attempt_count,
		sent_at IS NOT NULL, next_attempt_at, leased_until, lease_token::text FROM %s ORDER BY id`, key, r.ident(q)))
	r.noErr(err, "reading %s", q.name)
	table, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (modelRow, error) {
		var x modelRow
		return x, row.Scan(&x.id, &x.m, &x.key, &x.attempts, &x.sent, &x.next, &x.leasedUntil, &x.token)
	})
	r.noErr(err, "reading %s", q.name)
	return at, table
}

// checkNothingLost: the table holds exactly the model's events of q, in the states the model
// expects. It also refreshes what the model learns only from the table: ids and next_attempt_at.
func (r *modelRun) checkNothingLost(q *modelQueue, rows []modelRow, at time.Time) {
	seen := map[int]bool{}
	for _, row := range rows {
		e := r.model.events[row.m]
		if e == nil || e.queue != q {
			r.fail("nothing-lost", "%s holds id=%d m=%d, an event the model does not have there "+
				"(a rolled-back, truncated or purged row came back, or a row was duplicated)", q.name, row.id, row.m)
		}
		if seen[row.m] {
			r.fail("nothing-lost", "%s holds m=%d twice", q.name, row.m)
		}
		seen[row.m] = true
		e.id, e.nextAttemptAt = row.id, row.next
		r.checkRow(e, row, at)
	}
	for _, e := range r.model.eventsOf(q, nil) {
		if !seen[e.m] {
			r.fail("nothing-lost", "%v is gone from %s", e, q.name)
		}
	}
}

// checkRow compares one row with its event: key, sent, attempts, lease and backoff.
func (r *modelRun) checkRow(e *modelEvent, row modelRow, at time.Time) {
	if row.key != e.key || row.sent != e.sent || row.attempts != e.attempts {
		r.fail("nothing-lost", "%s id=%d: key %q sent=%t attempt_count=%d, the model has %v",
			e.queue.name, row.id, row.key, row.sent, row.attempts, e)
	}
	if (row.token == nil) != (row.leasedUntil == nil) {
		r.fail("fencing", "%s id=%d (m=%d): lease_token and leased_until must be set and cleared together, got %v and %v",
			e.queue.name, row.id, e.m, row.token, row.leasedUntil)
	}
	switch {
	case e.lease == nil && row.token != nil:
		r.fail("fencing", "%v carries lease %s until %s, but nobody holds it", e, *row.token, row.leasedUntil)
	case e.lease != nil && (row.token == nil || *row.token != e.lease.token || !row.leasedUntil.Equal(e.lease.until)):
		r.fail("fencing", "%v: the model holds token %s until %s, the row has %v until %v",
			e, e.lease.token, e.lease.until, row.token, row.leasedUntil)
	}
	if e.sent || row.next == nil {
		return
	}
	if !e.dueFrom.IsZero() && row.next.Before(e.dueFrom) && !r.cfg.skip["time"] {
		r.fail("time", "%v: next_attempt_at %s is earlier than backoff_min after the result (%s): "+
			"the backoff was counted from an older transaction start", e, row.next.Format("15:04:05.000000"),
			e.dueFrom.Format("15:04:05.000000"))
	}
	if latest := e.dueBy; (latest.IsZero() && row.next.After(at)) || (!latest.IsZero() && row.next.After(latest)) {
		r.fail("nothing-stuck", "%v: next_attempt_at %s is later than the model allows (%s)", e,
			row.next.Format("15:04:05.000000"), latest.Format("15:04:05.000000"))
	}
}

// checkIDsFollowCommitOrder: per key, the ids of deliverable rows ascend in commit order, so
// claims (which go by id) deliver in commit order.
func (r *modelRun) checkIDsFollowCommitOrder(q *modelQueue) {
	if !q.partitioned() {
		return
	}
	for _, key := range r.model.keysOf(q) {
		var last *modelEvent
		for _, e := range r.model.eventsOf(q, &key) {
			if !e.deliverable() {
				continue
			}
			if last != nil && e.id <= last.id {
				r.fail("commit-order", "%s key %q: m=%d committed after m=%d but has a smaller id (%d <= %d); the key:%s",
					q.name, key, e.m, last.m, e.id, last.id, r.model.describeKey(q, key))
			}
			last = e
		}
	}
}

// checkNoRepairNeeded: the partition heads (a cache of the table) are right, as pgdrain check
// (the operator's dry run of outbox.repair) sees them.
func (r *modelRun) checkNoRepairNeeded(q *modelQueue) {
	if !q.partitioned() || r.cfg.skip["no-repair"] {
		return
	}
	rows, err := r.operator.Query(r.ctx, `SELECT concat_ws(' ', partition_key, cause, detail) FROM outbox.repair($1, true)`, q.name)
	r.noErr(err, "repair(%s, dry_run => true)", q.name)
	problems, err := pgx.CollectRows(rows, pgx.RowTo[string])
	r.noErr(err, "repair(%s, dry_run => true)", q.name)
	if len(problems) > 0 {
		r.fail("no-repair", "outbox.repair(%s, dry_run => true) finds the derived state wrong: %s\n  pgdrain's state: %s",
			q.name, strings.Join(problems, "; "), r.derivedState(q, strings.Fields(problems[0])[0]))
	}
}

// checkNothingStuck runs one claim cycle on q, as a worker, in a transaction that is rolled back
// (so checking changes nothing): claim with a big batch until nothing more comes back. Every
// event due at `at` must come back, and nothing that may not.
func (r *modelRun) checkNothingStuck(q *modelQueue, at time.Time) {
	claimed := r.claimCycle(q, r.rng.IntN(2) == 0)
	for _, e := range r.model.mustBeClaimable(q, at) {
		if !claimed[e.m] && !r.headParkedWhileBusy(q, e.key) {
			r.fail("nothing-stuck", "%v is deliverable and due since %s but one claim cycle did not return it; "+
				"the key:%s\n  pgdrain's state: %s", e, at.Format("15:04:05.000000"),
				r.model.describeKey(q, e.key), r.derivedState(q, e.key))
		}
	}
}

// headParkedWhileBusy: the key's head is empty and parked for at most a second from now. A result
// that found its key empty while a producer (or requeue) of the key was still committing parks the
// head for a second instead of dropping it (docs/ordering.md); the row is then claimable once the
// park ends, which a later step's check requires (the park is over by then).
func (r *modelRun) headParkedWhileBusy(q *modelQueue, key string) bool {
	var parked bool
	err := r.owner.QueryRow(r.ctx, `SELECT EXISTS (
		SELECT 1 FROM outbox.partition_heads h JOIN outbox.queues x USING (queue_id)
		WHERE x.queue = $1 AND h.partition_key = $2 AND h.head_id IS NULL
		  AND h.parked_until > clock_timestamp() AND h.parked_until <= clock_timestamp() + interval '1 second')`,
		q.name, key).Scan(&parked)
	r.noErr(err, "reading the head of %s key %q", q.name, key)
	return parked
}

// claimCycle claims from q until a claim returns nothing, checking each row, and rolls back.
func (r *modelRun) claimCycle(q *modelQueue, lockMode bool) map[int]bool {
	tx, err := r.checker.Begin(r.ctx)
	r.noErr(err, "BEGIN (check)")
	defer func() { _ = tx.Rollback(r.ctx) }()
	fn := "claim_batch"
	if lockMode {
		fn = "claim_locked"
	}
	claimed := map[int]bool{}
	for range 10 {
		var batch []modelClaimed
		if lockMode {
			batch, err = r.claimLocked(tx, q, 1000)
		} else {
			batch, err = r.claimBatch(tx, q, 1000, time.Hour)
		}
		if err != nil {
			r.fail("nothing-stuck", "the check's %s(%s, 1000) failed: %v", fn, q.name, err)
		}
		if len(batch) == 0 {
			break
		}
		at := r.dbNow(tx) // the claim saw the rows at this time or earlier
		for _, c := range batch {
			if claimed[c.m] {
				r.fail("claim-rules", "one claim cycle (%s) on %s returned m=%d twice", fn, q.name, c.m)
			}
			claimed[c.m] = true
			r.checkClaim(q, c, at, "the check's "+fn)
		}
	}
	return claimed
}

// derivedState prints pgdrain's own state for a queue and key, to explain a stuck row.
func (r *modelRun) derivedState(q *modelQueue, key string) string {
	var state string
	err := r.owner.QueryRow(r.ctx, `SELECT concat_ws(E'\n    ',
		  'registration: ' || (SELECT to_jsonb(x)::text FROM outbox.queues x WHERE x.queue = $1),
		  'table oid now: ' || to_regclass($1)::oid,
		  'heads built: ' || EXISTS (SELECT 1 FROM outbox.partition_heads_built b JOIN outbox.queues x USING (queue_id) WHERE x.queue = $1),
		  'head: ' || COALESCE((SELECT to_jsonb(h)::text FROM outbox.partition_heads h JOIN outbox.queues x USING (queue_id)
		                        WHERE x.queue = $1 AND h.partition_key = $2), 'none'))`, q.name, key).Scan(&state)
	if err != nil {
		return fmt.Sprintf("(reading it failed: %v)", err)
	}
	return state
}

// checkStaleToken: a result, an extension or a release under a token that is nobody's must
// report so and leave the row exactly as it was.
func (r *modelRun) checkStaleToken() {
	st, ok := r.pickStaleToken()
	if !ok {
		return
	}
	before := r.rowText(st.queue, st.id)
	outcome := []string{"sent", "transient", "permanent"}[r.rng.IntN(3)]
	var call string
	var accepted bool
	switch r.rng.IntN(4) {
	case 0:
		call = fmt.Sprintf("apply_result(%s, %d, %s, %s)", st.queue.name, st.id, st.token, outcome)
		r.noErr(r.worker.QueryRow(r.ctx, `SELECT outbox.apply_result($1, $2, $3::text::uuid, $4)`,
			st.queue.name, st.id, st.token, outcome).Scan(&accepted), "%s", call)
	case 1:
		call = fmt.Sprintf("apply_results(%s, {%d}, {%s}, {%s})", st.queue.name, st.id, st.token, outcome)
		r.noErr(r.worker.QueryRow(r.ctx, `SELECT bool_or(applied) FROM outbox.apply_results($1, ARRAY[$2::bigint],
			ARRAY[$3::text::uuid], ARRAY[$4::text])`, st.queue.name, st.id, st.token, outcome).Scan(&accepted), "%s", call)
	case 2:
		call = fmt.Sprintf("extend_lease(%s, %d, %s, 1 hour)", st.queue.name, st.id, st.token)
		r.noErr(r.worker.QueryRow(r.ctx, `SELECT outbox.extend_lease($1, $2, $3::text::uuid, '1 hour') IS NOT NULL`,
			st.queue.name, st.id, st.token).Scan(&accepted), "%s", call)
	default:
		call = fmt.Sprintf("release(%s, %d, %s)", st.queue.name, st.id, st.token)
		r.noErr(r.worker.QueryRow(r.ctx, `SELECT outbox.release($1, $2, $3::text::uuid)`,
			st.queue.name, st.id, st.token).Scan(&accepted), "%s", call)
	}
	if after := r.rowText(st.queue, st.id); accepted || after != before {
		r.fail("stale-token", "%s with a stale token was accepted=%t; row before: %s\n  after: %s", call, accepted, before, after)
	}
}

// pickStaleToken picks a recently superseded token, or now and then a token nobody ever had on a
// live row. Only the latest stale tokens are kept.
func (r *modelRun) pickStaleToken() (modelStaleToken, bool) {
	md := r.model
	if len(md.stale) > 256 {
		md.stale = append([]modelStaleToken(nil), md.stale[len(md.stale)-64:]...)
	}
	if n := len(md.stale); n > 0 && r.rng.IntN(10) != 0 {
		return md.stale[n-1-r.rng.IntN(min(n, 64))], true
	}
	var live []*modelEvent
	for _, q := range md.queues {
		live = append(live, md.eventsOf(q, nil)...)
	}
	if len(live) == 0 {
		return modelStaleToken{}, false
	}
	e := live[r.rng.IntN(len(live))]
	b := make([]byte, 16)
	for i := range b {
		b[i] = byte(r.rng.IntN(256))
	}
	token := fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
	return modelStaleToken{queue: e.queue, id: e.id, token: token}, true
}

// rowText is the whole row with this id, as text ("" when there is none).
func (r *modelRun) rowText(q *modelQueue, id int64) string {
	var text []string
	rows, err := r.owner.Query(r.ctx, fmt.Sprintf(`SELECT to_jsonb(t)::text FROM %s t WHERE t.id = $1`, r.ident(q)), id)
	r.noErr(err, "reading %s id=%d", q.name, id)
	text, err = pgx.CollectRows(rows, pgx.RowTo[string])
	r.noErr(err, "reading %s id=%d", q.name, id)
	return strings.Join(text, "")
}
