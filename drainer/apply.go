package drainer

import (
	"context"
	"fmt"
	"log/slog"
	"runtime/debug"
	"time"

	"github.com/jackc/pgx/v5/pgtype"
	"go.opentelemetry.io/otel/trace"

	"github.com/pgdrain/pgdrain/internal/cohort"
	"github.com/pgdrain/pgdrain/internal/errtext"
)

const (
	// overrunWarnAfter is how long past its deadline an apply may run before the drainer logs that
	// it ignores its context (it still holds its apply slot).
	overrunWarnAfter = time.Second
	// shutdownSlack is added to ApplyTimeout when Run waits for applies in flight at shutdown: the
	// time an apply needs to return once its context has ended.
	shutdownSlack = 100 * time.Millisecond
)

// job is one claimed row on its way through apply and record.
type job struct {
	event   Event
	payload []byte
	token   pgtype.UUID // lease mode only
	// deadline is when this drainer must be done with the row: lease end minus LeaseMargin, on
	// this process's clock (lease mode), or the lock-mode batch's settle time.
	deadline time.Time
	// noExtend: an extension of this row's lease already failed; apply with the time left.
	noExtend    bool
	disposition Disposition
	errText     string
	// retryAt is when a transient row may be tried again, when the Applier said (RetryAt); zero:
	// the queue's backoff.
	retryAt time.Time
	// next is the row after this one in its partition's run (Config.RunLength), claimed with it
	// and applied after it in the same slot; nil at a run's end.
	next *job
	// cohort is the set of applies started together with this one (internal/cohort), for a
	// batching Applier; nil for a row applied after another in its slot.
	cohort *cohort.Cohort
	// claimStart is when the claim that returned this row started, on the server's clock.
	claimStart time.Time
}

// applyOne runs the Applier for j on a context that ends at min(now + ApplyTimeout, j.deadline)
// and is not cancelled with Run's ctx, and classifies the result.
func (r *runner[T]) applyOne(ctx context.Context, j *job) {
	timeout := r.cfg.ApplyTimeout
	if !j.deadline.IsZero() {
		timeout = min(timeout, time.Until(j.deadline))
	}
	actx := withEvent(context.WithoutCancel(ctx), j.event)
	if j.cohort != nil {
		actx = cohort.With(actx, j.cohort)
	}
	actx, cancel := context.WithTimeout(actx, timeout)
	defer cancel()
	var span trace.Span
	if r.d.tracer != nil {
		actx, span = r.d.startSpan(actx, j)
	}
	overrun := time.AfterFunc(timeout+overrunWarnAfter, func() {
		r.d.logger.WarnContext(ctx, "apply still running past its deadline: the Applier ignores its context; its slot stays taken",
			"id", j.event.ID, "event_type", j.event.Type, "deadline", timeout)
	})
	err := r.invoke(actx, j)
	overrun.Stop()
	j.disposition = dispositionOf(err)
	j.retryAt = retryAtOf(err)
	if span != nil {
		endSpan(span, j, err)
	}
	if err != nil {
		// The text is the Applier's, often a peer's words: made recordable here, once for every
		// Applier, sink and claim mode (a text PostgreSQL refuses would fail the batch's record).
		j.errText = errtext.Recordable(err.Error(), errtext.MaxBytes)
		level := slog.LevelDebug
		if j.disposition == DispositionPermanent && r.reg.permanentPolicy != RetryPermanent {
			// The event will never be delivered unless someone requeues it: say so where it is seen.
			level = slog.LevelWarn
		}
		r.d.logger.Log(ctx, level, "apply failed", "queue", j.event.Table, "id", j.event.ID,
			"partition_key", j.event.PartitionKey, "event_type", j.event.Type,
			"attempts", j.event.Attempts, "outcome", j.disposition.String(), "err", errtext.Recordable(j.errText, errtext.LogBytes))
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

// retryAtArray is the retry_at argument of apply_results / settle_locked: NULL (the queue's
// backoff) unless the Applier chose a time for a transient row.
func retryAtArray(jobs []*job) []pgtype.Timestamptz {
	out := make([]pgtype.Timestamptz, len(jobs))
	for i, j := range jobs {
		if j.disposition == DispositionTransient && !j.retryAt.IsZero() {
			out[i] = pgtype.Timestamptz{Time: j.retryAt, Valid: true}
		}
	}
	return out
}

// ids returns the ids of jobs, for logs.
func ids(jobs []*job) []int64 {
	out := make([]int64, len(jobs))
	for i, j := range jobs {
		out[i] = j.event.ID
	}
	return out
}
