package drainer

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5/pgtype"
	"go.opentelemetry.io/otel/trace"

	"github.com/pgdrain/pgdrain/internal/cohort"
	"github.com/pgdrain/pgdrain/internal/errtext"
	"github.com/pgdrain/pgdrain/internal/guard"
)

const (
	// overrunWarnAfter is how long past its deadline an apply may run before the drainer logs that
	// it ignores its context (it still holds its apply slot).
	overrunWarnAfter = time.Second
	// shutdownSlack is added to ApplyTimeout when Run waits for applies in flight at shutdown: the
	// time an apply needs to return once its context has ended.
	shutdownSlack = 100 * time.Millisecond
	// settleSlack is how long past settleBy a lock-mode batch waits for applies whose deadline was
	// settleBy: a quarter of the LeaseMargin kept for settling, since a loaded machine (a CI run of
	// many tests at once) took over 100ms to run an apply that returned on its context, whose
	// timeout was then dropped unrecorded; the rest is left for settle_locked and COMMIT.
	settleSlack = LeaseMargin / 4
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
	out := r.invoke(ctx, actx, j)
	overrun.Stop()
	j.setOutcome(out)
	if span != nil {
		endSpan(span, j, out.err)
	}
	if out.err != nil {
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

// setOutcome records what an apply came to on j.
func (j *job) setOutcome(a applied) {
	j.disposition, j.retryAt, j.errText = a.disposition, a.retryAt, a.text
}

// applied is what one apply came to: the error (one whose methods are safe to call), and what
// will be recorded for it.
type applied struct {
	err         error
	disposition Disposition
	retryAt     time.Time
	text        string // recordable (errtext.Recordable), "" when sent
}

// invoke decodes and applies j on a goroutine of its own (guard.Run), and classifies the error
// there. What would otherwise end the drainer's goroutine, or the process, becomes a permanent
// failure of this row: a panic in the Decoder or the Applier, a panic in a method of the error it
// returned (a typed nil pointer returned as an error, whose Error dereferences it), and
// runtime.Goexit (t.FailNow in a test's Applier), which no recover stops but which ends only the
// goroutine it runs on. ctx is Run's (for logs), actx the apply's.
func (r *runner[T]) invoke(ctx, actx context.Context, j *job) applied {
	return guard.Run(func() applied {
		payload, err := r.d.decode(j.payload)
		if err != nil {
			return classify(Permanent(fmt.Errorf("decoding payload: %w", err)))
		}
		return classify(r.d.apply(actx, j.event.Type, payload))
	}, func(c guard.Crash) applied {
		cause := fmt.Errorf("panic: %v", c.Panic)
		if c.Goexit {
			cause = errors.New("the Applier called runtime.Goexit (t.FailNow, t.Fatal or log.Fatal's kin) instead of returning")
		}
		r.d.logger.ErrorContext(ctx, "apply panicked; recorded as permanent", "id", j.event.ID,
			"event_type", j.event.Type, "panic", cause.Error(), "stack", string(c.Stack))
		return classify(Permanent(cause))
	})
}

// classify reads err: its class, its retry time and its text, made recordable here, once for every
// Applier, sink and claim mode (a text PostgreSQL refuses would fail the batch's record). It may
// panic in err's own methods (see invoke).
func classify(err error) applied {
	if err == nil {
		return applied{disposition: DispositionSent}
	}
	return applied{err: err, disposition: dispositionOf(err), retryAt: retryAtOf(err),
		text: errtext.Recordable(err.Error(), errtext.MaxBytes)}
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
