package main

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgdrain/pgdrain/drainer"
	"github.com/pgdrain/pgdrain/internal/lastscrape"
)

// The fencing moment. A fourth drainer ("stalled") claims one row with a 2s lease, and its Applier
// then ignores its deadline, the way a client stuck in a GC pause or a hung socket does: it comes
// back only after another replica has re-claimed the row (the lease ran out) and delivered it.
// Its late result must then be refused by the row's lease token: apply_results reports
// applied = false and changes nothing, which the drainer counts as pgdrain_outbox_lease_lost_total.

const (
	stalledLease        = 2 * time.Second
	stalledApplyTimeout = 500 * time.Millisecond
	// stalledMaxWait bounds the stall, in case no replica re-claims the row (the report then fails).
	stalledMaxWait = 30 * time.Second
)

// fenceResult is what the report says about the fencing moment.
type fenceResult struct {
	id         int64
	key        string
	claimedAt  time.Time
	returnedAt time.Time
	leaseLost  float64
	recorded   float64 // results the stalled drainer managed to record (must be 0)
	lateErr    error   // what the late call to the peer returned (it may hit one of the 503s too)
	err        error
}

func runStalled(ctx context.Context, dsn string, h *webhook, logger *slog.Logger) fenceResult {
	var res fenceResult
	pool, err := newPool(ctx, dsn, 3)
	if err != nil {
		res.err = fmt.Errorf("stalled drainer: connecting: %w", err)
		return res
	}
	defer pool.Close()
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	var once sync.Once
	apply := func(actx context.Context, _ string, payload json.RawMessage) error {
		ev, _ := drainer.EventFrom(actx)
		first := false
		once.Do(func() { first = true })
		if !first {
			// Only the first row is stalled; anything claimed afterwards is handed back untouched
			// as the drainer stops.
			return fmt.Errorf("stalled drainer is stopping")
		}
		res.id, res.key, res.claimedAt = ev.ID, ev.PartitionKey, time.Now()
		waitUntilSentByOthers(context.WithoutCancel(actx), pool, ev.ID)
		// Deliver anyway, late, ignoring the deadline: the peer sees a duplicate (at least once).
		res.lateErr = h.post(context.WithoutCancel(actx), "stalled", ev, payload)
		res.returnedAt = time.Now()
		stop()
		return res.lateErr
	}
	reg := lastscrape.New()
	d, err := drainer.New(pool, drainer.Config{
		Table: queueName, BatchSize: 1, ApplyTimeout: stalledApplyTimeout, Lease: stalledLease,
		PollFallback: time.Second,
	}, rawJSON, apply, drainer.WithLogger[json.RawMessage](logger.With("replica", "stalled")),
		drainer.WithMetrics[json.RawMessage](reg))
	if err != nil {
		res.err = fmt.Errorf("stalled drainer: %w", err)
		return res
	}
	if err := d.Run(runCtx); err != nil {
		res.err = fmt.Errorf("stalled drainer: %w", err)
		return res
	}
	res.leaseLost = counter(reg, "pgdrain_outbox_lease_lost_total", nil)
	res.recorded = counter(reg, "pgdrain_outbox_results_total", nil)
	return res
}

// waitUntilSentByOthers polls the row until another holder has recorded it as sent.
func waitUntilSentByOthers(ctx context.Context, pool *pgxpool.Pool, id int64) {
	deadline := time.Now().Add(stalledMaxWait)
	for time.Now().Before(deadline) {
		var sent bool
		err := pool.QueryRow(ctx, `SELECT sent_at IS NOT NULL FROM demo.events WHERE id = $1`, id).Scan(&sent)
		if err == nil && sent {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
}
