package gocheck

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"
)

// The model of TestModel: what the queues must hold, kept in Go and changed only by what the
// steps did, never by reading the database. Events are known by their model id m (the payload is
// {"m": m, "key": key}), because a row's id may change at COMMIT (docs/ordering.md) and is reset by
// TRUNCATE ... RESTART IDENTITY.

// modelRequeueToTail says what requeue_poisoned does to per-key order. Issue 11 (case 8) asks for
// an explicit, safe choice, and requeue_poisoned's header states it: a requeued row goes to the
// tail of its key, as if committed now (a new id), never before a successor already delivered.
// The model counts a requeue as a new commit of the event. With false, a requeued row would keep
// its old place.
const modelRequeueToTail = true

// modelQueue is one queue as the model knows it: its name and its current settings.
type modelQueue struct {
	name        string // schema-qualified table name, also the queue name
	schema      string
	table       string
	keyColumn   string // partition column; "" for an unpartitioned queue
	maxAttempts int
	backoffMin  time.Duration
	backoffMax  time.Duration
	policy      string // permanent_policy: 'poison' or 'retry' (unpartitioned only)
	// cachedIDs: the table was made by hand with an id sequence of CACHE 20, so each session hands
	// out ids from its own block and id order is not commit order unless pgdrain renumbers.
	cachedIDs bool
}

func (q *modelQueue) partitioned() bool { return q.keyColumn != "" }

// transientCap is the largest attempt_count a transient failure (or a permanent one under the
// 'retry' policy) may write: a partitioned row is never poisoned by it (invariant 4).
func (q *modelQueue) transientCap() int {
	if q.partitioned() {
		return q.maxAttempts - 1
	}
	return q.maxAttempts
}

func (q *modelQueue) settings() string {
	return fmt.Sprintf("max_attempts=%d backoff=%s..%s policy=%s", q.maxAttempts, q.backoffMin, q.backoffMax, q.policy)
}

// modelLease is a lease the model holds on an event (lease mode): its token and until when.
type modelLease struct {
	token string
	until time.Time
}

// modelEvent is one committed event.
type modelEvent struct {
	m        int
	queue    *modelQueue
	key      string // "" on an unpartitioned queue
	commit   int64  // position in commit order; a requeue to the tail gives a new one
	attempts int
	sent     bool
	lease    *modelLease // nil: the model holds no lease on it
	// After a transient failure next_attempt_at must lie in [dueFrom, dueBy] (zero: no bound).
	dueFrom, dueBy time.Time

	// What the last read of the table said (refreshed after every step): the row's current id and
	// next_attempt_at, which the model bounds but does not know exactly.
	id            int64
	nextAttemptAt *time.Time
}

func (e *modelEvent) poisoned() bool { return !e.sent && e.attempts >= e.queue.maxAttempts }

// deliverable: unsent and not poisoned (the rules' word; whether it is due is another question).
func (e *modelEvent) deliverable() bool { return !e.sent && e.attempts < e.queue.maxAttempts }

// dueAt says whether nothing the model or the table knows keeps e from being claimed at t.
func (e *modelEvent) dueAt(t time.Time) bool {
	if e.lease != nil && e.lease.until.After(t) {
		return false
	}
	return e.nextAttemptAt == nil || !e.nextAttemptAt.After(t)
}

func (e *modelEvent) String() string {
	state := "pending"
	switch {
	case e.sent:
		state = "sent"
	case e.poisoned():
		state = "poisoned"
	}
	lease := ""
	if e.lease != nil {
		lease = fmt.Sprintf(" leased until %s", e.lease.until.Format("15:04:05.000000"))
	}
	return fmt.Sprintf("m=%d(%s key=%q id=%d commit=%d attempts=%d %s%s)",
		e.m, e.queue.name, e.key, e.id, e.commit, e.attempts, state, lease)
}

// modelStaleToken is a token that is no longer anybody's: its lease was recorded, released,
// re-claimed, requeued away, or its table was truncated or dropped.
type modelStaleToken struct {
	queue *modelQueue
	id    int64
	token string
}

// model is the whole expected state.
type model struct {
	queues     []*modelQueue
	events     map[int]*modelEvent
	nextM      int
	nextCommit int64
	stale      []modelStaleToken

	produced, delivered, poisonings, requeued, purged, forgotten int
}

func newModel(queues []*modelQueue) *model {
	return &model{queues: queues, events: map[int]*modelEvent{}, nextM: 1}
}

// newEvent makes an event that is not committed yet: the producer writes it, commit adds it.
func (md *model) newEvent(q *modelQueue, key string) *modelEvent {
	e := &modelEvent{m: md.nextM, queue: q, key: key}
	md.nextM++
	return e
}

// commit records that a transaction committed these events, in this order (their insert order).
func (md *model) commit(events []*modelEvent) {
	for _, e := range events {
		md.nextCommit++
		e.commit = md.nextCommit
		md.events[e.m] = e
		md.produced++
	}
}

// eventsOf returns the live events of q (and key, unless key is nil), in commit order.
func (md *model) eventsOf(q *modelQueue, key *string) []*modelEvent {
	var out []*modelEvent
	for _, e := range md.events {
		if e.queue == q && (key == nil || e.key == *key) {
			out = append(out, e)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].commit < out[j].commit })
	return out
}

// keysOf returns the keys of q that have live events, sorted.
func (md *model) keysOf(q *modelQueue) []string {
	seen := map[string]bool{}
	for _, e := range md.events {
		if e.queue == q {
			seen[e.key] = true
		}
	}
	keys := make([]string, 0, len(seen))
	for k := range seen {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// head is the first deliverable event of a key in commit order: on a partitioned queue the only
// event of the key a claim may return (poisoned ones are skipped, invariant 3).
func (md *model) head(q *modelQueue, key string) *modelEvent {
	for _, e := range md.eventsOf(q, &key) {
		if e.deliverable() {
			return e
		}
	}
	return nil
}

// mustBeClaimable lists the events of q that a claim cycle starting after t must return
// (invariant 9): every due deliverable event, and on a partitioned queue only each key's head.
func (md *model) mustBeClaimable(q *modelQueue, t time.Time) []*modelEvent {
	var out []*modelEvent
	if !q.partitioned() {
		for _, e := range md.eventsOf(q, nil) {
			if e.deliverable() && e.dueAt(t) {
				out = append(out, e)
			}
		}
		return out
	}
	for _, key := range md.keysOf(q) {
		if h := md.head(q, key); h != nil && h.dueAt(t) && !md.inFlightBefore(h, t) {
			out = append(out, h)
		}
	}
	return out
}

// inFlightBefore says whether an event of h's key committed before h is still leased at t although
// poisoned: create_queue lowered max_attempts under it. Its worker may still record it sent, so a
// claim may let it block its key until the lease ends (or skip it: poisoned rows are skipped).
func (md *model) inFlightBefore(h *modelEvent, t time.Time) bool {
	for _, e := range md.eventsOf(h.queue, &h.key) {
		if e == h {
			return false
		}
		if !e.sent && e.lease != nil && e.lease.until.After(t) {
			return true
		}
	}
	return false
}

// whyNotClaimable returns "" when a claim at t may return e, else the invariant it would break
// and why.
func (md *model) whyNotClaimable(e *modelEvent, t time.Time) (invariant, why string) {
	switch {
	case e.sent:
		return "claim-rules", "it was already sent"
	case e.poisoned():
		return "claim-rules", fmt.Sprintf("it is poisoned (attempts %d >= max_attempts %d)", e.attempts, e.queue.maxAttempts)
	case !e.dueAt(t):
		return "claim-rules", fmt.Sprintf("it is not due at %s (leased or backing off)", t.Format("15:04:05.000000"))
	}
	if e.queue.partitioned() {
		if h := md.head(e.queue, e.key); h != e {
			return "commit-order", fmt.Sprintf("the key's first deliverable event in commit order is %v", h)
		}
	}
	return "", ""
}

// dropLease forgets the lease the model holds on e; its token becomes stale.
func (md *model) dropLease(e *modelEvent) {
	if e.lease == nil {
		return
	}
	md.stale = append(md.stale, modelStaleToken{queue: e.queue, id: e.id, token: e.lease.token})
	e.lease = nil
}

// lease records a new lease on e (a claim in lease mode); a lease the model held before is stale.
func (md *model) lease(e *modelEvent, token string, until time.Time) {
	md.dropLease(e)
	e.lease = &modelLease{token: token, until: until}
}

// record applies an outcome as apply_result and settle_locked must: every outcome clears the
// lease; 'transient' adds an attempt, capped so a partitioned row never poisons (at max_attempts -
// 1, which also lowers the count of a row that a lowered max_attempts poisoned while it was
// leased: it is deliverable again), and sets a backoff between backoff_min and backoff_max
// measured from the call (before..after); 'permanent' poisons unless the policy is 'retry'.
func (md *model) record(e *modelEvent, outcome string, before, after time.Time) {
	md.dropLease(e)
	e.dueFrom, e.dueBy, e.nextAttemptAt = time.Time{}, time.Time{}, nil
	q := e.queue
	switch {
	case outcome == "sent":
		e.sent = true
		md.delivered++
		return
	case outcome == "permanent" && q.policy == "poison":
		e.attempts = q.maxAttempts
	default:
		// Never fewer attempts than the row has: a row a lowered max_attempts poisoned while it was
		// leased stays poisoned.
		e.attempts = max(e.attempts, min(e.attempts+1, q.transientCap()))
	}
	if e.attempts >= q.maxAttempts {
		md.poisonings++
		return
	}
	e.dueFrom, e.dueBy = before.Add(q.backoffMin), after.Add(q.backoffMax)
	// Until the next read of the table: not due before the earliest time the backoff may end.
	e.nextAttemptAt = &e.dueFrom
}

// requeue gives poisoned events a fresh start, as requeue_poisoned must; with modelRequeueToTail
// they are new commits (in their old order) at the tail of their keys.
func (md *model) requeue(events []*modelEvent) {
	sort.Slice(events, func(i, j int) bool { return events[i].commit < events[j].commit })
	for _, e := range events {
		md.dropLease(e)
		e.attempts = 0
		e.dueFrom, e.dueBy = time.Time{}, time.Time{}
		e.nextAttemptAt = nil
		if modelRequeueToTail {
			md.nextCommit++
			e.commit = md.nextCommit
		}
		md.requeued++
	}
}

// forgetQueue drops every event of q: its table was truncated or dropped.
func (md *model) forgetQueue(q *modelQueue) {
	for _, e := range md.eventsOf(q, nil) { // in order: the stale tokens' order drives later steps
		md.dropLease(e)
		delete(md.events, e.m)
		md.forgotten++
	}
}

// poisonedOf returns the poisoned events of q in commit order.
func (md *model) poisonedOf(q *modelQueue) []*modelEvent {
	var out []*modelEvent
	for _, e := range md.eventsOf(q, nil) {
		if e.poisoned() {
			out = append(out, e)
		}
	}
	return out
}

// leased returns the events the model holds a lease on, in model-id order (deterministic).
func (md *model) leased() []*modelEvent {
	var out []*modelEvent
	for _, e := range md.events {
		if e.lease != nil {
			out = append(out, e)
		}
	}
	slices.SortFunc(out, func(a, b *modelEvent) int { return a.m - b.m })
	return out
}

// describeKey prints a key's events, for failure messages.
func (md *model) describeKey(q *modelQueue, key string) string {
	var b strings.Builder
	for _, e := range md.eventsOf(q, &key) {
		fmt.Fprintf(&b, "\n    %v", e)
	}
	return b.String()
}
