package drainer

import (
	"context"
	"time"
)

// wedgeWatchEnabled: the per-partition report needs a threshold, a partitioned queue and
// someone to tell; otherwise it costs nothing (the oldest-pending-age gauge still covers stalls).
func (r *runner[T]) wedgeWatchEnabled() bool {
	if r.cfg.WedgeWarnAfter <= 0 {
		return false
	}
	if r.reg.partitionColumn == "" || r.d.wedgeObserver == nil {
		r.d.logger.Info("WedgeWarnAfter is set but the wedge report is off: it needs a partitioned queue and WithWedgeObserver",
			"partitioned", r.reg.partitionColumn != "", "observer", r.d.wedgeObserver != nil)
		return false
	}
	return true
}

// watchWedges reports wedged partitions now and then at most once per WedgeWarnAfter.
func (r *runner[T]) watchWedges(ctx context.Context) {
	t := time.NewTicker(r.cfg.WedgeWarnAfter)
	defer t.Stop()
	for {
		r.reportWedges(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// reportWedges asks outbox.wedged_partitions for the wedgeReportLimit oldest stuck partitions,
// logs each as a warning and hands them to the observer.
func (r *runner[T]) reportWedges(ctx context.Context) {
	cctx, cancel := r.bounded(ctx)
	wedged, err := queryWedgedPartitions(cctx, r.d.db, r.reg.queue, r.cfg.WedgeWarnAfter, wedgeReportLimit)
	cancel()
	if err != nil {
		if ctx.Err() == nil {
			r.d.logger.WarnContext(ctx, "reading wedged partitions", "err", err)
		}
		return
	}
	if len(wedged) == 0 {
		return
	}
	for _, w := range wedged {
		r.d.logger.WarnContext(ctx, "partition wedged", "partition_key", w.PartitionKey, "head_id", w.HeadID,
			"head_attempts", w.HeadAttempts, "head_last_error", w.HeadLastError, "age", w.Age,
			"pending", w.Pending, "reason", w.Reason)
	}
	r.d.wedgeObserver(ctx, wedged)
}
