package drainer

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
)

// repairTimeout bounds one repair pass. Its cost grows with the queue's partitions, not its rows.
const repairTimeout = 2 * time.Minute

// repairCauses are the causes outbox.repair reports; the counter exports each at zero from the
// start. A cause not listed here is still counted when it occurs.
var repairCauses = []string{"missing_head", "floor_above_row", "parked_past_due", "stale_notes"}

// watchRepairs runs the repair pass at once and then every RepairInterval until ctx ends, each time
// also following the queue's NOTIFY channel (followChannel).
func (r *runner[T]) watchRepairs(ctx context.Context) {
	t := time.NewTicker(r.cfg.RepairInterval)
	defer t.Stop()
	for {
		if !r.repairOnce(ctx) {
			return
		}
		r.followChannel(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// repairOnce runs outbox.repair(queue, false): every row it returns is a problem it fixed, logged
// at Warn and counted. After a fix the loop claims at once. It returns false when the pass can
// never work (the function is missing: the database is not migrated far enough).
func (r *runner[T]) repairOnce(ctx context.Context) bool {
	rctx, cancel := context.WithTimeout(ctx, repairTimeout)
	defer cancel()
	repairs, err := queryRepair(rctx, r.d.db, r.reg.queue, false)
	if err != nil {
		if ctx.Err() != nil {
			return true
		}
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && pgErr.Code == "42883" {
			r.d.logger.WarnContext(ctx, "outbox.repair does not exist (migrate the outbox module up); the repair pass is off",
				"err", err)
			return false
		}
		r.d.logger.WarnContext(ctx, "repair pass failed; retrying at the next RepairInterval", "err", err,
			"retry_in", r.cfg.RepairInterval)
		return true
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
	return true
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
