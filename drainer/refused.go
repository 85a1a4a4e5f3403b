package drainer

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgdrain/pgdrain/internal/errtext"
)

// recordEach records jobs one at a time with record, after the batched call that carried them
// (apply_results, settle_locked) was refused with a data exception (refused): one result the
// server refuses must not cost the others of its batch their record, nor their rows a delivery
// more. A result refused on its own is recorded once more as escape makes it; one refused even
// so is left unrecorded (logged: its row is delivered again). A row not recorded (refused so, or
// reported not ours: its lease was lost) leaves the rest of its run unrecorded too, as one
// batched call would have: recorded, they would count as sent before a row of their partition
// that is still to be delivered, and would then come after it. record says whether it recorded
// j. recordEach stops at the first error that is not a data exception and returns it with the
// jobs it did not get to.
func (r *runner[T]) recordEach(ctx context.Context, jobs []*job, refused error, record func(*job) (bool, error)) (rest []*job, err error) {
	logger := r.d.logger
	logger.WarnContext(ctx, "recording a batch of results was refused (a data exception); recording its rows one by one",
		"rows", len(jobs), "ids", ids(jobs), "err", refused)
	behind := map[int64]bool{} // rows after an unrecorded row of their run
	for i, j := range jobs {
		if behind[j.event.ID] {
			logger.WarnContext(ctx, "a result is not recorded because an earlier row of its run was not; its row will be delivered again",
				"id", j.event.ID, "outcome", j.disposition.String())
			continue
		}
		recorded, err := record(j)
		if cause := dataException(err); cause != nil {
			logger.WarnContext(ctx, "a result was refused; recording it with its error text escaped to ASCII and no retry time",
				"id", j.event.ID, "outcome", j.disposition.String(), "err", err)
			j.escape(cause)
			recorded, err = record(j)
		}
		switch {
		case dataException(err) != nil:
			logger.ErrorContext(ctx, "a result was refused even escaped; it is not recorded and its row will be delivered again",
				"id", j.event.ID, "outcome", j.disposition.String(), "err", err)
			recorded = false
		case err != nil:
			return jobs[i:], err
		}
		if !recorded {
			for n := j.next; n != nil; n = n.next {
				behind[n.event.ID] = true
			}
		}
	}
	return nil, nil
}

// escape makes j's result recordable in any database once the server refused it on its own with
// cause: its error text escaped to ASCII (which every server encoding holds), saying why, and no
// retry time (the queue's backoff: a time out of the server's range is refused too). Its outcome
// stays: the attempt counts, and a permanent failure still poisons the row.
func (j *job) escape(cause *pgconn.PgError) {
	how := "its error text escaped to ASCII"
	if !j.retryAt.IsZero() {
		how += ", the queue's backoff instead of its retry time"
	}
	// The note first: a long text is cut, the reason stays.
	j.errText = errtext.Recordable(fmt.Sprintf("[pgdrain: PostgreSQL refused this result (SQLSTATE %s %s); recorded with %s] %s",
		cause.Code, strconv.QuoteToASCII(cause.Message), how, strconv.QuoteToASCII(j.errText)), errtext.MaxBytes)
	j.retryAt = time.Time{}
}
