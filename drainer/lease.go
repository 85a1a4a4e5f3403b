package drainer

import (
	"context"
	"sync"
	"time"

	"github.com/pgdrain/pgdrain/internal/cohort"
)

// A claim that took all it asked for is followed by one that waits, while part of the window is
// free, for the rest of it, when applies are much faster than claims (a row's time in its slot,
// averaged, under a gatherRatio-th of a claim's): the rows just dispatched then free their slots
// long before another claim could return, and a claim and its results cost about the same whatever
// their size, so claiming the free part at once would only halve every claim (with a no-op
// Applier claims alternated around half of ApplyConcurrency). The wait is at most gatherRatio
// average slot times and claimGather. With applies a quarter of a claim or slower, a freed slot
// is refilled at once, as before.
const (
	gatherRatio = 4
	claimGather = time.Millisecond
)

// pipeline is lease mode: a continuous pipeline in the manner of River's producer. Claimed rows
// wait in claim order for one of ApplyConcurrency apply slots; a slot that frees takes the next
// waiting row at once, and the claimer claims more whenever the drainer holds fewer than
// claimSize rows and none is waiting for a slot. Results go to the recorder as applies finish.
// Nothing waits for the slowest apply of a batch.
type pipeline[T any] struct {
	r   *runner[T]
	rec *recorder[T]
	// freed is signalled (without blocking) when an apply slot frees.
	freed chan struct{}

	mu       sync.Mutex     // guards the fields below
	slotAvg  time.Duration  // running average of how long a row holds its slot (0 until one freed)
	waiting  []*job         // claimed, not started, in claim order
	running  int            // slots taken
	parked   map[int64]*job // claimed again while an apply of the row still runs (see dispatch)
	stopping bool           // Run's ctx ended: start nothing more
	idle     chan struct{}  // closed when running drops to 0 while stopping
}

func newPipeline[T any](r *runner[T]) *pipeline[T] {
	p := &pipeline[T]{r: r, freed: make(chan struct{}, 1), idle: make(chan struct{}), parked: map[int64]*job{}}
	p.rec = newRecorder(r, p.busy)
	return p
}

func (p *pipeline[T]) lock()   { p.mu.Lock() }
func (p *pipeline[T]) unlock() { p.mu.Unlock() }

// busy reports whether an apply is running or a claimed row waits for one: the recorder flushes at
// once when nothing is, since no further result is coming soon.
func (p *pipeline[T]) busy() bool {
	p.lock()
	defer p.unlock()
	return p.running > 0 || len(p.waiting) > 0 || len(p.parked) > 0
}

// room is how many rows the claimer may claim now: none while a claimed row still waits for a
// slot or four claims' worth of results wait to be recorded (two cost one replica 5-10% of its
// rate: claims and flushes then overlap less), otherwise up to claimSize held in all,
// once a quarter of that is free (or nothing runs): many replicas refilling one slot at a time
// would cost a claim per row. Unrecorded results hold their partitions' heads in flight, which
// every claim of the queue walks past: claims that outran the recorder made each other slower
// (4 replicas at BatchSize 256 kept 10,000 results pending, and their searches read 55,000
// buffers each).
func (p *pipeline[T]) room() int {
	size := p.r.cfg.claimSize()
	if p.rec.backlog() >= 4*size {
		return 0
	}
	p.lock()
	defer p.unlock()
	if len(p.waiting) > 0 || p.stopping {
		return 0
	}
	room := max(size-p.running-len(p.parked), 0)
	if room < max(size/4, 1) && p.running > 0 {
		return 0
	}
	return room
}

// run claims and dispatches until ctx ends, or until the pool is closed under Run, then shuts down
// (see shutdown). It returns when every apply in flight has returned or been given up on and
// every result is recorded (or, the pool closed, dropped), with claimLoop's error.
func (p *pipeline[T]) run(ctx context.Context) error {
	go p.rec.run(ctx)
	err := p.claimLoop(ctx)
	p.shutdown(ctx)
	return err
}

// claimLoop claims when there is room: at once after a claim that found rows (as soon as a slot
// frees; after a full claim, once the window is free or a short gather is over, see gatherRatio),
// otherwise on a wake-up (NOTIFY, a reconnected LISTEN, a recorded result, a repair), at
// the earliest backoff or lease end in the queue, or after PollFallback. It returns nil when ctx
// ends, and Run's error when a claim or next_due met the pool closed (see poolClosed).
func (p *pipeline[T]) claimLoop(ctx context.Context) error {
	r := p.r
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	errDelay := errorDelayMin
	hungry := true            // the last claim found rows (or something woke us): claim when there is room
	var gatherUntil time.Time // after a full claim: wait until then for the whole window to free
	var claimAvg time.Duration
	for {
		if ctx.Err() != nil {
			return nil
		}
		wait := time.Duration(-1) // no timer
		if hungry {
			n := p.room()
			if n > 0 && n < p.r.cfg.claimSize() && time.Now().Before(gatherUntil) {
				wait, n = time.Until(gatherUntil), 0
			}
			if n > 0 {
				if d := r.paced(ctx); d > 0 {
					wait, n = d, 0
				}
			}
			if n > 0 {
				claimStart := time.Now()
				jobs, err := r.claimLeased(ctx, n)
				claimAvg = movingAverage(claimAvg, time.Since(claimStart))
				r.took(ctx, claimStart, true, err)
				switch {
				case ctx.Err() != nil:
					p.dispatch(jobs) // released by shutdown
					return nil
				case err != nil:
					if closed := poolClosed(err); closed != nil {
						return closed
					}
					r.d.logRetry(ctx, "claiming batch failed; retrying", err, errDelay)
					if !r.backOff(ctx, errDelay) {
						return nil
					}
					errDelay = min(2*errDelay, errorDelayMax)
					continue
				case len(jobs) > 0:
					errDelay = errorDelayMin
					r.lastFound = time.Now()
					p.dispatch(jobs)
					// A full claim: with fast applies the next one gathers the window (see gatherRatio).
					if a := p.slotAverage(); len(jobs) == n && a > 0 && gatherRatio*a < claimAvg {
						gatherUntil = time.Now().Add(min(gatherRatio*a, claimGather))
					}
					if len(jobs) == n {
						continue
					}
					// Fewer than asked for: the queue is drained for now, and a claim at once would
					// mostly find nothing (at a trickle, every other claim). Claim again after the
					// busy-poll pause, or sooner on a NOTIFY or when results were recorded (a recorded
					// head may have made its successor claimable).
					hungry = false
				default:
					errDelay = errorDelayMin
					hungry = false
				}
			}
		}
		if !hungry {
			var err error
			if wait, err = r.nextWake(ctx); err != nil {
				return err
			}
		}
		var timerC <-chan time.Time
		if wait >= 0 {
			timer.Reset(wait)
			timerC = timer.C
		}
		var freed <-chan struct{}
		if hungry {
			freed = p.freed
		}
		select {
		case <-ctx.Done():
			return nil
		case <-r.wake:
			r.woke(ctx)
			hungry = true
		case <-timerC:
			hungry = true
		case <-freed:
		}
		timer.Stop()
	}
}

// claimLeased leases up to n rows (outbox.claim_batch). When the claim took so long that the rows
// no longer have a full ApplyTimeout before their deadline (a slow database, a short Lease), their
// leases are extended at once, all in one round trip, rather than one round trip per row as each
// starts.
func (r *runner[T]) claimLeased(ctx context.Context, n int) ([]*job, error) {
	start := time.Now()
	deadline := start.Add(r.cfg.Lease - LeaseMargin)
	cctx, cancel := r.bounded(ctx)
	jobs, err := queryClaimBatch(cctx, r.d.db, r.reg.queue, n, r.cfg.RunLength, r.cfg.Lease, deadline)
	cancel()
	if err != nil {
		return nil, err
	}
	r.claimed(start, jobs, n)
	r.metrics.observeClaim(ClaimLease, time.Since(start))
	if len(jobs) == 0 || time.Until(deadline) >= r.cfg.ApplyTimeout {
		return jobs, nil
	}
	extStart := time.Now()
	ectx, cancel := context.WithTimeout(ctx, max(time.Until(deadline), r.cfg.ApplyTimeout))
	defer cancel()
	kept, err := queryExtendLeases(ectx, r.d.db, r.reg.queue, jobs, r.cfg.Lease)
	if err != nil {
		r.d.logger.WarnContext(ctx, "extending the leases of a slow claim failed; applying with the time left",
			"rows", len(jobs), "err", err)
		for _, j := range jobs {
			j.noExtend = true
		}
		return jobs, nil
	}
	held := jobs[:0]
	for i, j := range jobs {
		if !kept[i] {
			r.metrics.leaseLost.Inc()
			continue
		}
		j.deadline = extStart.Add(r.cfg.Lease - LeaseMargin)
		held = append(held, j)
	}
	return held, nil
}

// dispatch queues claimed rows and fills the free slots. A row whose previous apply still runs
// (its lease ended while an Applier ignored its context, and this drainer claimed it again, in
// this Run or after an earlier one) is parked until that apply returns: a drainer never applies
// one row twice at the same time.
func (p *pipeline[T]) dispatch(jobs []*job) {
	if len(jobs) == 0 {
		return
	}
	p.lock()
	for _, j := range runs(jobs) {
		if running := p.r.d.inflight.done(j.event.ID); running != nil {
			p.park(j, running)
			continue
		}
		p.waiting = append(p.waiting, j)
	}
	p.unlock()
	p.fill()
}

// take marks j's row as applying, or parks j while an apply of the row runs. Called with p locked.
func (p *pipeline[T]) take(j *job) bool {
	for !p.r.d.inflight.begin(j.event.ID) {
		if running := p.r.d.inflight.done(j.event.ID); running != nil {
			p.park(j, running)
			return false
		}
	}
	return true
}

// park holds j until running (the end of the apply of its row that still runs) is closed, then
// puts it first in line. Called with p locked.
func (p *pipeline[T]) park(j *job, running <-chan struct{}) {
	p.parked[j.event.ID] = j
	go func() {
		<-running
		p.lock()
		again := p.parked[j.event.ID]
		if again != nil && !p.stopping {
			delete(p.parked, j.event.ID)
			p.waiting = append([]*job{again}, p.waiting...)
		}
		p.unlock()
		p.fill()
	}()
}

// fill starts waiting rows while slots are free.
func (p *pipeline[T]) fill() {
	p.lock()
	defer p.unlock()
	var started []*job
	for !p.stopping && len(p.waiting) > 0 && p.running < p.r.cfg.ApplyConcurrency {
		j := p.waiting[0]
		p.waiting[0] = nil
		p.waiting = p.waiting[1:]
		if !p.take(j) { // claimed again while waiting, and the first claim started
			continue
		}
		p.running++
		started = append(started, j)
	}
	if len(started) == 0 {
		return
	}
	c := cohort.New(len(started))
	now := time.Now()
	for _, j := range started {
		j.cohort = c
		go p.work(j, now)
	}
}

// work applies one row in its slot, and the rest of its run after it, and hands the results to the
// recorder together (a run recorded in one flush moves its partition's head once). A run stops at
// its first row not sent; the rows after it are given back untouched.
func (p *pipeline[T]) work(j *job, started time.Time) {
	ctx := p.r.runCtx
	var done []*job
	for cur := j; cur != nil; cur = cur.next {
		if cur != j && !p.startApplying(cur) { // claimed again while an earlier apply of it runs
			p.r.release(ctx, cur.rest())
			break
		}
		state := p.r.ensureLease(ctx, cur)
		if state == leaseKept && ctx.Err() != nil {
			state = leaseUnsure // shutting down: give it back untouched
		}
		if state == leaseKept {
			p.r.applyOne(ctx, cur)
			done = append(done, cur)
		} else if cur.cohort != nil {
			cur.cohort.Done() // never reaches the Applier
		}
		if cur != j {
			p.stopApplying(cur)
		}
		if state != leaseKept {
			if state == leaseUnsure {
				p.r.release(ctx, cur.rest())
			} else {
				p.r.release(ctx, cur.next.rest())
			}
			break
		}
		if cur.disposition != DispositionSent {
			p.r.release(ctx, cur.next.rest())
			break
		}
	}
	p.rec.add(done...)
	p.lock()
	p.slotAvg = movingAverage(p.slotAvg, time.Since(started))
	p.running--
	if p.stopping && p.running == 0 {
		close(p.idle)
	}
	p.unlock()
	p.r.d.inflight.end(j.event.ID) // a parked claim of the row goes first in line (see park)
	p.fill()
	p.rec.nudge() // the last apply running may have ended: flush without waiting
	select {
	case p.freed <- struct{}{}:
	default:
	}
}

// startApplying marks a row after the first of its run as in a slot, unless an earlier apply of
// it still runs (a drainer never applies one row twice at the same time).
func (p *pipeline[T]) startApplying(j *job) bool {
	return p.r.d.inflight.begin(j.event.ID)
}

func (p *pipeline[T]) stopApplying(j *job) {
	p.r.d.inflight.end(j.event.ID)
}

// slotAverage is the running average of how long a row holds its slot, from its start to its
// slot freeing (0 before the first): its apply, and the wait for a goroutine to run it.
func (p *pipeline[T]) slotAverage() time.Duration {
	p.lock()
	defer p.unlock()
	return p.slotAvg
}

// movingAverage folds x into avg (an exponential moving average over about the last 8; x itself
// when avg is 0).
func movingAverage(avg, x time.Duration) time.Duration {
	if avg == 0 {
		return x
	}
	return avg + (x-avg)/8
}

// shutdown is Run's end in lease mode: rows not started are released at once (no attempt counted),
// applies in flight get ApplyTimeout (each has a non-cancellable context that ends by then) and
// their results are recorded. An apply that ignores its context and is still running after that is
// given up on: its result is not recorded and its row is delivered again when its lease ends.
func (p *pipeline[T]) shutdown(ctx context.Context) {
	r := p.r
	p.lock()
	p.stopping = true
	var unstarted []*job
	for _, j := range p.waiting {
		unstarted = append(unstarted, j.rest()...)
	}
	p.waiting = nil
	for _, j := range p.parked {
		unstarted = append(unstarted, j.rest()...)
	}
	clear(p.parked)
	running := p.running
	if running == 0 {
		close(p.idle)
	}
	p.unlock()
	r.release(ctx, unstarted)
	grace := time.NewTimer(r.cfg.ApplyTimeout + shutdownSlack)
	defer grace.Stop()
	select {
	case <-p.idle:
	case <-grace.C:
		p.lock()
		left := p.running
		p.unlock()
		r.d.logger.WarnContext(ctx, "applies still running after ApplyTimeout at shutdown: they ignore their context; "+
			"their results are not recorded and their rows will be delivered again when their leases end",
			"applies", left, "apply_timeout", r.cfg.ApplyTimeout)
	}
	p.rec.close()
}

// leaseState is what ensureLease found.
type leaseState int

const (
	leaseKept   leaseState = iota // apply it
	leaseUnsure                   // the extension failed with no time left: do not apply, release
	leaseGone                     // someone else holds the row now: do not apply, do not record
)

// ensureLease makes sure j's lease outlasts a full ApplyTimeout before it is applied, extending
// it when the row waited for a slot so long that it does not.
func (r *runner[T]) ensureLease(ctx context.Context, j *job) leaseState {
	if time.Until(j.deadline) >= r.cfg.ApplyTimeout {
		return leaseKept
	}
	if j.noExtend {
		if time.Until(j.deadline) > 0 {
			return leaseKept
		}
		return leaseUnsure
	}
	j.noExtend = true // one attempt per row: a database too slow to extend is not asked again
	start := time.Now()
	ectx, cancel := context.WithTimeout(ctx, max(time.Until(j.deadline), r.cfg.ApplyTimeout))
	defer cancel()
	kept, err := queryExtendLease(ectx, r.d.db, r.reg.queue, j, r.cfg.Lease)
	switch {
	case err != nil && time.Until(j.deadline) > 0:
		if ctx.Err() == nil {
			r.d.logger.WarnContext(ctx, "extending lease failed; applying with the time left", "id", j.event.ID, "err", err)
		}
		return leaseKept
	case err != nil:
		r.d.logger.WarnContext(ctx, "extending lease failed; leaving the row", "id", j.event.ID, "err", err)
		return leaseUnsure
	case !kept:
		r.metrics.leaseLost.Inc()
		r.d.logger.DebugContext(ctx, "lease lost before apply; not applying", "id", j.event.ID)
		return leaseGone
	}
	j.deadline = start.Add(r.cfg.Lease - LeaseMargin)
	return leaseKept
}

// release gives rows back untouched, in one round trip, so another drainer can take them at once,
// with no attempt counted. A failure is logged: their leases will end.
func (r *runner[T]) release(ctx context.Context, jobs []*job) {
	if len(jobs) == 0 {
		return
	}
	rctx, cancel := r.bounded(context.WithoutCancel(ctx))
	defer cancel()
	if err := queryRelease(rctx, r.d.db, r.reg.queue, jobs); err != nil {
		r.d.logger.WarnContext(ctx, "releasing unstarted rows failed; their leases will expire", "rows", len(jobs), "err", err)
		return
	}
	r.d.logger.DebugContext(ctx, "released unstarted rows", "rows", len(jobs))
}
