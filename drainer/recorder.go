package drainer

import (
	"context"
	"sync"
	"time"
)

// resultFlushDelay is the longest a finished apply's result waits to be batched with others while
// more applies are running: short, because on a partitioned queue a row's successor can be claimed
// only once its result is recorded.
const resultFlushDelay = 10 * time.Millisecond

// recorder records lease-mode results with outbox.apply_results, one flush at a time, batching
// what finished meanwhile. A flush is due as soon as any of these holds: claimSize results are
// pending; no apply is running or waiting (nothing more is coming soon); the oldest pending result
// has waited resultFlushDelay; the earliest lease among pending results ends within LeaseMargin
// (its deadline), so a result is back before anyone else can claim its row; or the recorder is
// closing. After a flush that recorded something it wakes the claimer: a recorded head unblocks
// its partition's successor and a transient result sets a backoff to wake up for, which no NOTIFY
// announces.
type recorder[T any] struct {
	r    *runner[T]
	busy func() bool // an apply is running or waiting
	kick chan struct{}
	done chan struct{}

	mu      sync.Mutex
	pending []*job
	index   map[int64]int // position in pending by id
	since   time.Time     // when the oldest pending result arrived
	closed  bool
}

func newRecorder[T any](r *runner[T], busy func() bool) *recorder[T] {
	return &recorder[T]{r: r, busy: busy, kick: make(chan struct{}, 1), done: make(chan struct{}), index: map[int64]int{}}
}

// add queues j's result. After close it is dropped (its apply outlived the shutdown grace).
func (rec *recorder[T]) add(j *job) {
	rec.mu.Lock()
	if rec.closed {
		rec.mu.Unlock()
		rec.r.d.logger.Warn("apply returned after shutdown; its result is not recorded (the row will be delivered again)",
			"id", j.event.ID, "outcome", j.disposition.String())
		return
	}
	if len(rec.pending) == 0 {
		rec.since = time.Now()
	}
	// A row claimed again after its lease ran out may have two results pending: only the later
	// claim's token can count (and apply_results takes each id once).
	if i, ok := rec.index[j.event.ID]; ok {
		if j.deadline.After(rec.pending[i].deadline) {
			rec.pending[i] = j
		}
		rec.mu.Unlock()
		rec.r.metrics.leaseLost.Inc()
		rec.nudge()
		return
	}
	rec.index[j.event.ID] = len(rec.pending)
	rec.pending = append(rec.pending, j)
	rec.mu.Unlock()
	rec.nudge()
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
	rec.mu.Unlock()
	rec.nudge()
	<-rec.done
}

// run flushes until closed and empty.
func (rec *recorder[T]) run(ctx context.Context) {
	defer close(rec.done)
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		jobs, wait, closed := rec.due()
		if len(jobs) > 0 {
			if rec.r.recordLeased(ctx, jobs) {
				rec.r.signal()
			}
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
	n, since, closed := len(rec.pending), rec.since, rec.closed
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
	flushAt := since.Add(resultFlushDelay)
	if !earliest.IsZero() && earliest.Before(flushAt) {
		flushAt = earliest
	}
	if wait = time.Until(flushAt); wait > 0 && !closed && n < rec.r.cfg.claimSize() && rec.busy() {
		return nil, wait, false
	}
	rec.mu.Lock()
	jobs, rec.pending = rec.pending, nil
	clear(rec.index)
	rec.mu.Unlock()
	return jobs, 0, closed
}

// recordLeased writes the results of jobs in one apply_results round trip and reports whether any
// counted. A row reported applied = false was no longer ours (its lease ran out and someone else
// took it): it is counted, never retried from here. A failed round trip is logged: the rows are
// claimed again when their leases end.
func (r *runner[T]) recordLeased(ctx context.Context, jobs []*job) (recorded bool) {
	byID := make(map[int64]*job, len(jobs))
	for _, j := range jobs {
		byID[j.event.ID] = j
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), recordTimeout)
	defer cancel()
	err := queryApplyResults(rctx, r.d.pool, r.reg.queue, jobs, func(id int64, applied bool) {
		j := byID[id]
		if applied {
			recorded = true
			r.metrics.recorded(j.disposition)
			return
		}
		r.metrics.leaseLost.Inc()
		r.d.logger.DebugContext(ctx, "result refused: lease lost (the row was claimed again)",
			"id", id, "outcome", j.disposition.String())
	})
	if err != nil {
		const msg = "recording results failed; the rows will be claimed again when their leases end"
		if cause := unavailable(err); cause != "" {
			r.d.logger.WarnContext(ctx, msg+" (database unavailable)", "rows", len(jobs), "err", err, "cause", cause)
		} else {
			r.d.logger.ErrorContext(ctx, msg, "rows", len(jobs), "err", err)
		}
	}
	return recorded
}
