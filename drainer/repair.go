package drainer

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
)

// repairTimeout bounds one repair pass at first. Its cost grows with the queue's partitions, not
// its rows. A pass cut off at its bound gets twice the bound the next time, up to repairTimeoutMax:
// a fixed bound below a queue's walk would cut off every pass, and the pass would never finish.
const (
	repairTimeout    = 2 * time.Minute
	repairTimeoutMax = 32 * time.Minute
)

// repairShare bounds the repair pass's share of a drainer's time: after a pass that took d, the
// next starts no sooner than repairShare × d after it started (and at a RepairInterval tick). With
// millions of keys pending one pass took 28 s: at the default interval of a minute, half a core for
// as long as such a backlog lasted, and a snapshot held half the time.
const repairShare = 10

// repairCauses are the causes outbox.repair reports; the counter exports each at zero from the
// start. A cause not listed here is still counted when it occurs.
var repairCauses = []string{"missing_head", "floor_above_row", "parked_past_due", "stale_notes"}

// watchRepairs runs the repair pass at once and then at RepairInterval ticks, no sooner than
// repairShare times the last pass's duration after it started, until ctx ends; every tick also
// follows the queue's NOTIFY channel (followChannel).
func (r *runner[T]) watchRepairs(ctx context.Context) {
	t := time.NewTicker(r.cfg.RepairInterval)
	defer t.Stop()
	var next time.Time // no pass before then
	bound := repairTimeout
	for {
		if !time.Now().Before(next) {
			start := time.Now()
			ok, nextBound := r.repairOnce(ctx, bound)
			if !ok {
				return
			}
			took := time.Since(start)
			next = start.Add(repairShare * took)
			r.d.logger.DebugContext(ctx, "repair pass done", "queue", r.reg.queue, "took", took,
				"next_no_sooner_than", next.Sub(start), "next_bound", nextBound)
			bound = nextBound
		}
		r.followChannel(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// repairOnce runs outbox.repair(queue, false), bounded by bound: every row it returns is a problem it
// fixed, logged at Warn and counted. After a fix the loop claims at once. ok is false when the pass
// can never work (the function is missing: the database is not migrated far enough). nextBound is
// the next pass's bound: twice this one, up to repairTimeoutMax, when the pass ran into it.
func (r *runner[T]) repairOnce(ctx context.Context, bound time.Duration) (ok bool, nextBound time.Duration) {
	rctx, cancel := context.WithTimeout(ctx, bound)
	defer cancel()
	repairs, err := queryRepair(rctx, r.d.db, r.reg.queue, false)
	if err != nil {
		if ctx.Err() != nil {
			return true, bound
		}
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && pgErr.Code == "42883" {
			r.d.logger.WarnContext(ctx, "outbox.repair does not exist (migrate the outbox module up); the repair pass is off",
				"err", err)
			return false, bound
		}
		if rctx.Err() != nil {
			nextBound = min(2*bound, repairTimeoutMax)
			r.d.logger.WarnContext(ctx, "repair pass cut off at its bound; the next pass gets twice as long",
				"queue", r.reg.queue, "bound", bound, "next_bound", nextBound, "err", err)
			return true, nextBound
		}
		r.d.logger.WarnContext(ctx, "repair pass failed; retrying at the next RepairInterval", "err", err,
			"retry_in", r.cfg.RepairInterval)
		return true, bound
	}
	for _, p := range repairs {
		r.metrics.repaired(p.cause)
		attrs := []any{"queue", r.reg.queue, "partition_key", p.partitionKey, "cause", p.cause}
		if p.headID != nil {
			attrs = append(attrs, "head_id", *p.headID)
		} else {
			attrs = append(attrs, "head_id", nil)
		}
		attrs = append(attrs, "detail", p.detail)
		r.d.logger.WarnContext(ctx, "repaired derived state", attrs...)
	}
	if len(repairs) > 0 {
		r.signal()
	}
	return true, bound
}

// followChannel re-reads the queue's registration (outbox.queue_info) and moves the drainer's
// LISTEN to the channel it names when outbox.create_queue changed it while the drainer ran: one
// still listening on the old channel hears nothing, and claims new rows only every PollFallback.
// A failed read changes nothing (claims report what is wrong).
func (r *runner[T]) followChannel(ctx context.Context) {
	if r.sub == nil {
		return
	}
	cctx, cancel := r.bounded(ctx)
	defer cancel()
	reg, err := loadRegistration(cctx, r.d.db, r.d.table)
	if err != nil || reg.channel == "" {
		return
	}
	if was := r.sub.current(); was != reg.channel {
		r.d.logger.InfoContext(ctx, "the queue's NOTIFY channel changed (outbox.create_queue); listening on the new one",
			"was", was, "now", reg.channel)
		r.sub.retarget(reg.channel)
		r.signal() // rows announced on the new channel before now were not heard
	}
}
