package drainer

import (
	"cmp"
	"context"
	"sync"
	"time"

	"github.com/pgdrain/pgdrain/internal/pgerr"
)

// resultFlushDelay is the longest a finished apply's result waits to be batched with others while
// more applies are running: short, because on a partitioned queue a row's successor can be claimed
// only once its result is recorded.
const resultFlushDelay = 10 * time.Millisecond

// maxResultsPerFlush is the most results one apply_results call carries: the function refuses
// more ids than a claim may take (MaxBatchSize). Results that finished meanwhile beyond it go in the
// next flush, at once.
const maxResultsPerFlush = MaxBatchSize

// recorder records lease-mode results with outbox.apply_results, one flush at a time, batching
// what finished meanwhile. A flush is due as soon as any of these holds: claimSize results are
// pending; no apply is running or waiting (nothing more is coming soon); the oldest pending result
// has waited resultFlushDelay; the earliest lease among pending results ends within LeaseMargin
// (its deadline), so a result is back before anyone else can claim its row; or the recorder is
// closing. After a flush that recorded something it wakes the claimer: a recorded head unblocks
// its partition's successor and a transient result sets a backoff to wake up for, which no NOTIFY
// announces.
//
// A flush that fails because the database is unavailable (a restart, a failover, a killed
// connection: see unavailable), on a passing conflict with other transactions (pgerr.Conflict:
// a deadlock, a serialization failure, PostgreSQL's multixact race), or cancelled by the server
// (pgerr.Cancelled: its lock_timeout or statement_timeout, pg_cancel_backend), is retried with
// backoff, together with whatever finished meanwhile,
// for as long as a result still has time before its deadline (its lease end minus LeaseMargin);
// results whose deadline passed are dropped (their rows are delivered again after their leases).
// Any other failure drops the flush's results at once: retrying would not help.
type recorder[T any] struct {
	r    *runner[T]
	busy func() bool // an apply is running or waiting
	kick chan struct{}
	done chan struct{}

	mu       sync.Mutex
	pending  []*job
	index    map[int64]int // position in pending by id
	flushing int           // results of the flush being written
	since    time.Time     // when the oldest pending result arrived
	closed   bool
	closeBy  time.Time // closed: retries stop by then (shutdown stays bounded)
	retryAt  time.Time // a failed flush is retried then (zero: no retry pending)
}

func newRecorder[T any](r *runner[T], busy func() bool) *recorder[T] {
	return &recorder[T]{r: r, busy: busy, kick: make(chan struct{}, 1), done: make(chan struct{}), index: map[int64]int{}}
}

// add queues the results of jobs, a run's rows or one row, together: a flush takes all of a run or
// none of it, so a run is recorded in one apply_results call, which alone can refuse its later rows
// when an earlier one was taken from us (docs/sql-api.md, claim_runs). After close they are
// dropped (their apply outlived the shutdown grace).
func (rec *recorder[T]) add(jobs ...*job) {
	rec.mu.Lock()
	if rec.closed {
		rec.mu.Unlock()
		for _, j := range jobs {
			rec.r.d.logger.Warn("apply returned after shutdown; its result is not recorded (the row will be delivered again)",
				"id", j.event.ID, "outcome", j.disposition.String())
		}
		return
	}
	if len(rec.pending) == 0 && len(jobs) > 0 {
		rec.since = time.Now()
	}
	lost := 0
	for _, j := range jobs {
		// A row claimed again after its lease ran out may have two results pending: only the later
		// claim's token can count (and apply_results takes each id once).
		if i, ok := rec.index[j.event.ID]; ok {
			if j.deadline.After(rec.pending[i].deadline) {
				rec.pending[i] = j
			}
			lost++
			continue
		}
		rec.index[j.event.ID] = len(rec.pending)
		rec.pending = append(rec.pending, j)
	}
	rec.mu.Unlock()
	if lost > 0 {
		rec.r.metrics.leaseLost.Add(float64(lost))
	}
	rec.nudge()
}

// backlog is how many results are not yet recorded: pending, and in the flush being written.
func (rec *recorder[T]) backlog() int {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	return len(rec.pending) + rec.flushing
}

func (rec *recorder[T]) nudge() {
	select {
	case rec.kick <- struct{}{}:
	default:
	}
}

// close records every pending result and returns when they are written; later results are dropped.
func (rec *recorder[T]) close() {
	rec.mu.Lock()
	rec.closed = true
	rec.closeBy = time.Now().Add(recordTimeout)
	rec.mu.Unlock()
	rec.nudge()
	<-rec.done
}

// run flushes until closed and empty.
func (rec *recorder[T]) run(ctx context.Context) {
	defer close(rec.done)
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	retryDelay := time.Duration(0)
	for {
		jobs, wait, closed := rec.due()
		if len(jobs) > 0 {
			rest, err := rec.r.recordLeased(ctx, jobs)
			rec.r.took(ctx, time.Now(), false, err)
			rec.mu.Lock()
			rec.flushing = 0
			rec.mu.Unlock()
			// Also when nothing counted: a claimer held back by the backlog (pipeline.room) may
			// claim again.
			rec.r.signal()
			if err == nil {
				retryDelay = 0
				continue
			}
			retryDelay = pgerr.Next(retryDelay)
			rec.retry(ctx, rest, err, retryDelay)
			continue
		}
		if closed {
			return
		}
		var timerC <-chan time.Time
		if wait > 0 {
			timer.Reset(wait)
			timerC = timer.C
		}
		select {
		case <-rec.kick:
		case <-timerC:
		}
		timer.Stop()
	}
}

// due takes the pending results when a flush is due; otherwise it says how long until one is
// (0: only a new result can make one due).
func (rec *recorder[T]) due() (jobs []*job, wait time.Duration, closed bool) {
	rec.mu.Lock()
	n, since, closed, retryAt := len(rec.pending), rec.since, rec.closed, rec.retryAt
	var earliest time.Time
	for _, j := range rec.pending {
		if earliest.IsZero() || j.deadline.Before(earliest) {
			earliest = j.deadline
		}
	}
	rec.mu.Unlock()
	if n == 0 {
		return nil, 0, closed
	}
	if !retryAt.IsZero() {
		// A failed flush waits for its backoff, then goes at once with everything pending.
		if wait = time.Until(retryAt); wait > 0 {
			return nil, wait, false
		}
		rec.mu.Lock()
		jobs = rec.takeLocked()
		rec.retryAt = time.Time{}
		rec.mu.Unlock()
		return jobs, 0, closed
	}
	flushAt := since.Add(resultFlushDelay)
	if !earliest.IsZero() && earliest.Before(flushAt) {
		flushAt = earliest
	}
	if wait = time.Until(flushAt); wait > 0 && !closed && n < rec.r.cfg.claimSize() && rec.busy() {
		return nil, wait, false
	}
	rec.mu.Lock()
	jobs = rec.takeLocked()
	rec.mu.Unlock()
	return jobs, 0, closed
}

// takeLocked takes the oldest pending results for a flush, at most maxResultsPerFlush, and whole
// runs; the rest stay pending, due at once. rec.mu is held.
func (rec *recorder[T]) takeLocked() []*job {
	n := min(len(rec.pending), maxResultsPerFlush)
	// A run's results are pending side by side (add): never cut between two of them.
	for n < len(rec.pending) && n > 1 && sameRun(rec.pending[n-1], rec.pending[n]) {
		n--
	}
	jobs := rec.pending[:n:n]
	rec.pending = rec.pending[n:]
	clear(rec.index)
	for i, j := range rec.pending {
		rec.index[j.event.ID] = i
	}
	if len(rec.pending) > 0 {
		rec.since = time.Time{} // the oldest left has waited long enough: due at once
	}
	rec.flushing = n
	return jobs
}

// retry puts back the results of a failed flush that may still be recorded in time, and schedules
// the next flush after delay (sooner if the earliest of their deadlines comes first). The database
// being unavailable, a result keeps its chance while its deadline is ahead (and, once the recorder
// is closing, until closeBy); the others, and all of them after any other error, are dropped and
// logged: their rows are claimed again when their leases end.
func (rec *recorder[T]) retry(ctx context.Context, jobs []*job, err error, delay time.Duration) {
	logger := rec.r.d.logger
	// The database unavailable, a passing conflict with other transactions, or the server's own
	// timeouts (the same call may get past them): retried while leases last.
	cause := cmp.Or(rec.r.d.unavailable(err), pgerr.Conflict(err), pgerr.Cancelled(err))
	rec.r.d.recheckIsolation(ctx, err)
	now := time.Now()
	var kept, dropped int
	var earliest time.Time
	rec.mu.Lock()
	for _, j := range jobs {
		if cause == "" || !now.Before(j.deadline) || rec.closed && !now.Before(rec.closeBy) {
			dropped++
			continue
		}
		if i, ok := rec.index[j.event.ID]; ok { // claimed again and finished meanwhile: the later claim counts
			if j.deadline.After(rec.pending[i].deadline) {
				rec.pending[i] = j
			}
			continue
		}
		if len(rec.pending) == 0 {
			rec.since = now
		}
		rec.index[j.event.ID] = len(rec.pending)
		rec.pending = append(rec.pending, j)
		kept++
	}
	for _, j := range rec.pending {
		if earliest.IsZero() || j.deadline.Before(earliest) {
			earliest = j.deadline
		}
	}
	if len(rec.pending) > 0 {
		rec.retryAt = now.Add(delay)
		if !earliest.IsZero() && earliest.Before(rec.retryAt) {
			rec.retryAt = earliest
		}
	}
	rec.mu.Unlock()
	const dropMsg = "recording results failed; the rows will be claimed again when their leases end"
	switch {
	case cause == "":
		logger.ErrorContext(ctx, dropMsg, "rows", len(jobs), "err", err)
	case kept > 0:
		logger.WarnContext(ctx, "recording results failed; retrying while their leases last",
			"rows", kept, "dropped", dropped, "err", err, "cause", cause, "retry_in", delay)
	default:
		logger.WarnContext(ctx, dropMsg+" (no lease left to retry in)", "rows", dropped, "err", err, "cause", cause)
	}
}

// recordLeased writes the results of jobs in one apply_results round trip. A row reported applied = false was no longer ours (its lease ran out and someone else
// took it): it is counted, never retried from here. A batch the server refuses with a data
// exception is recorded row by row (recordEach). A failed round trip returns its error and the
// jobs not recorded (the recorder retries or drops them, see retry).
func (r *runner[T]) recordLeased(ctx context.Context, jobs []*job) (rest []*job, err error) {
	byID := make(map[int64]*job, len(jobs))
	for _, j := range jobs {
		byID[j.event.ID] = j
	}
	// Bounded by ClaimTimeout (at most Lease): a flush stuck on a dead connection would otherwise
	// outlive the leases of the results it carries and of those finishing meanwhile.
	rctx, cancel := r.bounded(context.WithoutCancel(ctx))
	defer cancel()
	counted := func(id int64, applied bool) {
		j := byID[id]
		if applied {
			r.metrics.recorded(j.disposition)
			return
		}
		r.metrics.leaseLost.Inc()
		r.d.logger.DebugContext(ctx, "result refused: lease lost (the row was claimed again)",
			"id", id, "outcome", j.disposition.String())
	}
	err = queryApplyResults(rctx, r.d.db, r.reg.queue, jobs, r.cfg.AsyncResults, counted)
	switch {
	case err == nil:
		return nil, nil
	case dataException(err) == nil:
		return jobs, err
	}
	rest, err = r.recordEach(ctx, jobs, err, func(j *job) (bool, error) {
		recorded := false
		err := queryApplyResults(rctx, r.d.db, r.reg.queue, []*job{j}, r.cfg.AsyncResults, func(id int64, applied bool) {
			counted(id, applied)
			recorded = applied
		})
		return recorded, err
	})
	return rest, err
}

// sameRun: b follows a in one run (a partition's rows claimed together, applied in one slot).
func sameRun(a, b *job) bool {
	return a.next == b
}
