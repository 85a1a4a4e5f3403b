package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgdrain/pgdrain/drainer"
)

// Section 7: one slow apply in 32 (issue 13). Every row whose id is a multiple of 32 takes 50 ms to
// apply, every other row 1 ms. The drainer's continuous pipeline refills a slot as soon as it
// frees; a batch-at-a-time loop (claim_batch, apply all concurrently, wait for the slowest,
// apply_results: the drainer before the pipeline) waits 50 ms for nearly every batch.

const (
	pipelineSlots = 32 // ApplyConcurrency of the drainer, batch size of the loop
	pipelineFast  = time.Millisecond
	pipelineSlow  = 50 * time.Millisecond
	pipelineEvery = 32 // one apply in pipelineEvery is slow
	pipelineWarm  = time.Second
)

// pipelineApply sleeps as long as row id's apply takes.
func pipelineApply(ctx context.Context, id int64) {
	d := pipelineFast
	if id%pipelineEvery == 0 {
		d = pipelineSlow
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}

// pipelineVariant starts draining queue q and returns a stop that waits until it has stopped.
type pipelineVariant struct {
	name  string
	start func(ctx context.Context, pool *pgxpool.Pool, q string) (stop func() error, err error)
}

var pipelineVariants = []pipelineVariant{
	{"continuous pipeline (package drainer)", startPipelineDrainer},
	{"batch at a time (claim, apply all, wait for the slowest, record)", startBatchLoop},
}

func startPipelineDrainer(ctx context.Context, pool *pgxpool.Pool, q string) (func() error, error) {
	cfg := drainer.Config{Table: q, ApplyConcurrency: pipelineSlots, ApplyTimeout: 5 * time.Second, PollFallback: time.Second}
	d, err := drainer.New(pool, cfg, func(b []byte) (json.RawMessage, error) { return b, nil },
		func(ctx context.Context, _ string, _ json.RawMessage) error {
			ev, _ := drainer.EventFrom(ctx)
			pipelineApply(ctx, ev.ID)
			return nil
		})
	if err != nil {
		return nil, err
	}
	return runUntilStopped(ctx, d.Run), nil
}

func startBatchLoop(ctx context.Context, pool *pgxpool.Pool, q string) (func() error, error) {
	return runUntilStopped(ctx, func(ctx context.Context) error { return batchLoop(ctx, pool, q) }), nil
}

// runUntilStopped runs fn in a goroutine until the returned stop cancels it and returns fn's error.
func runUntilStopped(ctx context.Context, fn func(context.Context) error) func() error {
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- fn(runCtx) }()
	return func() error {
		cancel()
		return <-done
	}
}

// batchLoop is the drainer as it was before the pipeline, lease mode: claim a batch, apply every
// row concurrently, wait for the slowest, record all results in one round trip, claim again.
func batchLoop(ctx context.Context, pool *pgxpool.Pool, q string) error {
	for {
		rows, err := pool.Query(ctx, `SELECT id, lease_token FROM outbox.claim_batch($1, $2, '30 seconds')`, q, pipelineSlots)
		var ids []int64
		var tokens []pgtype.UUID
		if err == nil {
			var id int64
			var token pgtype.UUID
			_, err = pgx.ForEachRow(rows, []any{&id, &token}, func() error {
				ids, tokens = append(ids, id), append(tokens, token)
				return nil
			})
		}
		switch {
		case ctx.Err() != nil:
			return nil
		case err != nil:
			return fmt.Errorf("claiming: %w", err)
		case len(ids) == 0:
			time.Sleep(10 * time.Millisecond)
			continue
		}
		var wg sync.WaitGroup
		for _, id := range ids {
			wg.Go(func() { pipelineApply(ctx, id) })
		}
		wg.Wait()
		outcomes := make([]string, len(ids))
		for i := range outcomes {
			outcomes[i] = "sent"
		}
		_, err = pool.Exec(ctx, `SELECT count(*) FROM outbox.apply_results($1, $2, $3, $4)`, q, ids, tokens, outcomes)
		if ctx.Err() != nil {
			return nil
		}
		if err != nil {
			return fmt.Errorf("recording results: %w", err)
		}
	}
}

// pipelineOnce fills queue q with n rows, drains it with v and returns the events sent per second
// over window, measured after pipelineWarm (start-up left out).
func pipelineOnce(ctx context.Context, pool *pgxpool.Pool, v pipelineVariant, q string, n int, window time.Duration) (float64, error) {
	if err := fillQueue(ctx, pool, q, n, false, 0); err != nil {
		return 0, err
	}
	sent := func() (int64, time.Time, error) {
		var c int64
		err := pool.QueryRow(ctx, fmt.Sprintf("SELECT count(*) FROM %s WHERE sent_at IS NOT NULL", q)).Scan(&c)
		return c, time.Now(), err
	}
	stop, err := v.start(ctx, pool, q)
	if err != nil {
		return 0, err
	}
	time.Sleep(pipelineWarm)
	s1, t1, err1 := sent()
	time.Sleep(window)
	s2, t2, err2 := sent()
	if err := errors.Join(stop(), err1, err2); err != nil {
		return 0, err
	}
	if s2 >= int64(n) {
		return 0, fmt.Errorf("%s drained all %d rows within %s: raise -pipeline-events", v.name, n, pipelineWarm+window)
	}
	return float64(s2-s1) / t2.Sub(t1).Seconds(), nil
}

func benchPipeline(ctx context.Context, o options, emit func(string)) error {
	pool, err := freshDatabase(ctx, o.server, "bench_pipeline", true, 8)
	if err != nil {
		return err
	}
	defer pool.Close()
	meanApply := (float64(pipelineEvery-1)*pipelineFast.Seconds() + pipelineSlow.Seconds()) / pipelineEvery
	emit(fmt.Sprintf("## 7. One slow apply in %d: continuous pipeline vs batch at a time\n\n"+
		"Unpartitioned queue pre-filled with %d events, lease mode, one drainer with %d apply slots; the apply of "+
		"a row whose id is a multiple of %d takes %s, of the others %s. Events sent per second over %s after a %s warm-up, median "+
		"(min–max) of %d runs. Ceiling: what the applies alone allow (%d slots / mean apply %.2f ms for the pipeline; "+
		"%d rows per %s for the batch loop, whose batches nearly all hold a slow row).\n\n",
		pipelineEvery, o.pipelineEvents, pipelineSlots, pipelineEvery, pipelineSlow, pipelineFast, o.pipelineWindow,
		pipelineWarm, o.runs, pipelineSlots, meanApply*1000, pipelineSlots, pipelineSlow))
	emit("| drain | events/s | ceiling |\n|---|---:|---:|\n")
	ceilings := []float64{pipelineSlots / meanApply, pipelineSlots / pipelineSlow.Seconds()}
	var medians []float64
	for i, v := range pipelineVariants {
		var rates []float64
		for run := range o.runs {
			q := fmt.Sprintf("public.pipeline_%d_%d", i, run)
			r, err := pipelineOnce(ctx, pool, v, q, o.pipelineEvents, o.pipelineWindow)
			if err != nil {
				return fmt.Errorf("%s: %w", v.name, err)
			}
			rates = append(rates, r)
			if err := execAll(ctx, pool, fmt.Sprintf("SELECT outbox.drop_queue('%s', true)", q)); err != nil {
				return err
			}
		}
		s := summarize(rates)
		medians = append(medians, s.median)
		emit(fmt.Sprintf("| %s | %s | %.0f |\n", v.name, s.format("%.0f"), ceilings[i]))
	}
	emit(fmt.Sprintf("\nThe pipeline drains %.1f× as fast (medians).\n\n", medians[0]/medians[1]))
	return nil
}
