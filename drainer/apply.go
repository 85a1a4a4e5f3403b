package drainer

import (
	"context"
	"fmt"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgtype"
)

// maxErrorText caps the error text stored in last_error.
const maxErrorText = 4000

// job is one claimed row on its way through apply and record.
type job struct {
	event   Event
	payload []byte
	token   pgtype.UUID // lease mode only
	// deadline is when this drainer must be done with the row: lease end minus LeaseMargin, on
	// this process's clock. Zero in lock mode (the row lock has no end).
	deadline    time.Time
	started     bool
	leaseLost   bool
	disposition Disposition
	errText     string
}

// applyJobs applies jobs with at most ApplyConcurrency at a time, in claim order. It stops starting
// new ones once ctx is cancelled; those already started run to the end on a context that ignores
// the cancellation. prepare, when given, runs before each apply and may veto it; finished, when
// given, is told of each job whose apply has ended.
func (r *runner[T]) applyJobs(ctx context.Context, jobs []*job, prepare func(context.Context, *job) bool,
	finished func(*job)) {
	inner := context.WithoutCancel(ctx)
	var next atomic.Int64
	var wg sync.WaitGroup
	for range min(r.cfg.ApplyConcurrency, len(jobs)) {
		wg.Go(func() {
			for ctx.Err() == nil {
				i := int(next.Add(1)) - 1
				if i >= len(jobs) {
					return
				}
				j := jobs[i]
				j.started = true
				if prepare != nil && !prepare(inner, j) {
					continue
				}
				r.applyOne(inner, j)
				if finished != nil {
					finished(j)
				}
			}
		})
	}
	wg.Wait()
}

// applyOne runs the Applier for j with its deadline and classifies the result.
func (r *runner[T]) applyOne(ctx context.Context, j *job) {
	timeout := r.cfg.ApplyTimeout
	if !j.deadline.IsZero() {
		timeout = min(timeout, time.Until(j.deadline))
	}
	actx, cancel := context.WithTimeout(withEvent(ctx, j.event), timeout)
	defer cancel()
	err := r.invoke(actx, j)
	j.disposition = dispositionOf(err)
	if err != nil {
		j.errText = err.Error()
		if len(j.errText) > maxErrorText {
			j.errText = j.errText[:maxErrorText]
		}
		r.d.logger.DebugContext(ctx, "apply failed", "id", j.event.ID, "event_type", j.event.Type,
			"attempts", j.event.Attempts, "outcome", j.disposition.String(), "err", err)
	}
}

// invoke decodes and applies, turning a decoding error or a panic into a permanent error.
func (r *runner[T]) invoke(ctx context.Context, j *job) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = Permanent(fmt.Errorf("panic: %v", p))
			r.d.logger.ErrorContext(ctx, "apply panicked; recorded as permanent", "id", j.event.ID,
				"event_type", j.event.Type, "panic", fmt.Sprint(p), "stack", string(debug.Stack()))
		}
	}()
	payload, err := r.d.decode(j.payload)
	if err != nil {
		return Permanent(fmt.Errorf("decoding payload: %w", err))
	}
	return r.d.apply(ctx, j.event.Type, payload)
}

// textArray is the errors argument of apply_results / settle_locked: NULL where the row was sent.
func textArray(jobs []*job) []pgtype.Text {
	out := make([]pgtype.Text, len(jobs))
	for i, j := range jobs {
		if j.disposition != DispositionSent {
			out[i] = pgtype.Text{String: j.errText, Valid: true}
		}
	}
	return out
}
