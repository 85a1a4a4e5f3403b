package drainer

import (
	"context"
	"sync"
	"time"
)

// recorder collects the finished applies of one lease-mode batch and records them with
// apply_results: all at once when the batch ends, which is one round trip per batch, or earlier,
// when the first finished row's lease would otherwise run out while a slow apply of the same
// batch is still going (its result would then be refused and the row delivered again).
type recorder[T any] struct {
	r       *runner[T]
	ctx     context.Context
	mu      sync.Mutex
	pending []*job
	timer   *time.Timer
	flushes sync.WaitGroup
}

func (r *runner[T]) startRecorder(ctx context.Context) *recorder[T] {
	return &recorder[T]{r: r, ctx: ctx}
}

// finished queues j for recording and arms the early flush for the oldest lease in the queue.
func (rec *recorder[T]) finished(j *job) {
	if j.leaseLost || !j.started {
		return
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	rec.pending = append(rec.pending, j)
	if rec.timer != nil {
		return
	}
	// Flush a margin before the row's own deadline (which is already a margin before its lease ends).
	rec.flushes.Add(1)
	rec.timer = time.AfterFunc(time.Until(j.deadline)-LeaseMargin, rec.flushEarly)
}

// flushEarly records what has finished so far, because a lease is about to run out.
func (rec *recorder[T]) flushEarly() {
	defer rec.flushes.Done()
	rec.mu.Lock()
	jobs := rec.pending
	rec.pending, rec.timer = nil, nil
	rec.mu.Unlock()
	rec.r.recordLeased(rec.ctx, jobs)
}

// close records everything not recorded yet; it returns when every result is written.
func (rec *recorder[T]) close() {
	rec.mu.Lock()
	if rec.timer != nil && rec.timer.Stop() {
		rec.flushes.Done() // the early flush will not run
	}
	// An early flush that has started records what it took; the rest is recorded here.
	jobs := rec.pending
	rec.pending, rec.timer = nil, nil
	rec.mu.Unlock()
	rec.r.recordLeased(rec.ctx, jobs)
	rec.flushes.Wait()
}
