package main

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgdrain/pgdrain/bench/internal/cpustat"
	"github.com/pgdrain/pgdrain/drainer"
)

// Section 2: end-to-end drain throughput through the Go drainer (package drainer): a queue
// pre-filled with o.events rows, drained to the last sent row by 1 or 4 replicas with a no-op
// applier.

// drainCase is one drainer configuration.
type drainCase struct {
	replicas, concurrency int
	partitioned           bool
	mode                  drainer.ClaimMode
	batchSize             int // 0 = the default (32)
	runLength             int // 0 = the default (1: the seed's claim)
	keys                  int // partitioned: 0 = about 6 rows per key
}

func (c drainCase) String() string {
	p := "unpartitioned"
	if c.partitioned {
		p = "partitioned"
	}
	return fmt.Sprintf("| %d | %d | %s | %s |", c.replicas, c.concurrency, p, c.mode)
}

// fillQueue creates queue q (partitioned over keys keys, n/6 when 0, or not) holding n pending rows.
func fillQueue(ctx context.Context, pool *pgxpool.Pool, q string, n int, partitioned bool, keys int) error {
	if partitioned {
		keys = cmp.Or(keys, max(n/6, 1))
		return execAll(ctx, pool, fmt.Sprintf("SELECT outbox.create_queue('%s', 'resource_id')", q),
			insertSQL(q, n, fmt.Sprintf("'key-' || (g %% %d)", keys)), "VACUUM ANALYZE "+q, settleFill)
	}
	return execAll(ctx, pool, fmt.Sprintf("SELECT outbox.create_queue('%s')", q),
		fmt.Sprintf(`INSERT INTO %s (event_type, payload) SELECT 'evt', jsonb_build_object('n', g, 'pad', repeat('x', 80))
			FROM generate_series(1, %d) g`, q, n), "VACUUM ANALYZE "+q, settleFill)
}

// unsent reports whether q has a row not yet sent.
func unsent(ctx context.Context, pool *pgxpool.Pool, q string) (bool, error) {
	var left bool
	err := pool.QueryRow(ctx, fmt.Sprintf("SELECT EXISTS (SELECT 1 FROM %s WHERE sent_at IS NULL)", q)).Scan(&left)
	return left, err
}

// waitDrained polls until q has no unsent row and returns when it saw that.
func waitDrained(ctx context.Context, pool *pgxpool.Pool, q string, limit time.Duration) (time.Time, error) {
	deadline := time.Now().Add(limit)
	for {
		left, err := unsent(ctx, pool, q)
		if err != nil {
			return time.Time{}, err
		}
		if !left {
			return time.Now(), nil
		}
		if time.Now().After(deadline) {
			return time.Time{}, fmt.Errorf("%s not drained after %s", q, limit)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// drainOnce drains n pre-filled events and returns the rate (events/s) and the machine's CPU per
// event (µs, every core; cpustat.Span).
func drainOnce(ctx context.Context, pool *pgxpool.Pool, c drainCase, q string, n int) (float64, float64, error) {
	if err := fillQueue(ctx, pool, q, n, c.partitioned, c.keys); err != nil {
		return 0, 0, err
	}
	cfg := drainer.Config{Table: q, ApplyConcurrency: c.concurrency, ClaimMode: c.mode, PollFallback: time.Second,
		BatchSize: c.batchSize, RunLength: c.runLength}
	if c.partitioned {
		cfg.ExpectPartitionColumn = "resource_id"
	}
	decode := func(b []byte) (json.RawMessage, error) { return b, nil }
	apply := func(context.Context, string, json.RawMessage) error { return nil }
	runCtx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	errs := make(chan error, c.replicas)
	start := time.Now()
	span := cpustat.Start()
	for range c.replicas {
		d, err := drainer.New(pool, cfg, decode, apply)
		if err != nil {
			cancel()
			return 0, 0, err
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := d.Run(runCtx); err != nil {
				errs <- err
			}
		}()
	}
	end, err := waitDrained(ctx, pool, q, 5*time.Minute)
	cpu := span.PerEvent(n)
	cancel()
	wg.Wait()
	close(errs)
	if err != nil {
		return 0, 0, err
	}
	if e := <-errs; e != nil {
		return 0, 0, e
	}
	return float64(n) / end.Sub(start).Seconds(), cpu, nil
}

// drainRuns drains case c o.runs times, each on a new queue numbered from *run (dropped after it),
// and returns the rates and CPU per event of the runs.
func drainRuns(ctx context.Context, pool *pgxpool.Pool, c drainCase, o options, run *int) (rates, cpus []float64, err error) {
	return drainRunsOf(ctx, pool, c, o.events, o.runs, run)
}

// drainRunsOf is drainRuns of n events.
func drainRunsOf(ctx context.Context, pool *pgxpool.Pool, c drainCase, n, runs int, run *int) (rates, cpus []float64, err error) {
	for range runs {
		*run++
		q := fmt.Sprintf("public.drain_%d", *run)
		r, cpu, err := drainOnce(ctx, pool, c, q, n)
		if err != nil {
			return nil, nil, err
		}
		rates, cpus = append(rates, r), append(cpus, cpu)
		if err := execAll(ctx, pool, fmt.Sprintf("SELECT outbox.drop_queue('%s', true)", q)); err != nil {
			return nil, nil, err
		}
	}
	return rates, cpus, nil
}

func benchDrain(ctx context.Context, o options, emit func(string)) error {
	pool, err := freshDatabase(ctx, o.server, "bench_drain", true, 24)
	if err != nil {
		return err
	}
	defer pool.Close()
	emit(fmt.Sprintf("## 2. End-to-end drain through the Go drainer, no-op applier\n\n%d pre-filled events (partitioned: about 6 per key) drained to the last sent row; "+
		"events/s, median (min–max) of %d runs; BatchSize default (32; = ApplyConcurrency when that is > 1). "+
		"CPU µs per event: the whole machine's CPU time (every core: drainers, server, everything else running) from the drain's "+
		"start to its last sent row, per event (/proc/stat).\n\n", o.events, o.runs))
	emit("| replicas | ApplyConcurrency | queue | mode | events/s | CPU µs per event |\n|---:|---:|---|---|---:|---:|\n")
	run := 0
	for _, mode := range []drainer.ClaimMode{drainer.ClaimLease, drainer.ClaimLock} {
		for _, partitioned := range []bool{false, true} {
			for _, replicas := range []int{1, 4} {
				for _, conc := range []int{1, 32} {
					c := drainCase{replicas: replicas, concurrency: conc, partitioned: partitioned, mode: mode}
					rates, cpus, err := drainRuns(ctx, pool, c, o, &run)
					if err != nil {
						return fmt.Errorf("%s: %w", c, err)
					}
					emit(fmt.Sprintf("%s %s | %s |\n", c, summarize(rates).format("%.0f"), summarize(cpus).format("%.0f")))
				}
			}
		}
	}
	emit("\n")
	return benchBatchSize(ctx, pool, o, emit, run)
}

// benchBatchSize: the same drain with larger claims (ApplyConcurrency 1, 4 replicas), which spread
// each statement's and each commit's cost over more rows.
func benchBatchSize(ctx context.Context, pool *pgxpool.Pool, o options, emit func(string), run int) error {
	emit(fmt.Sprintf("### 2b. Batch size (4 replicas, ApplyConcurrency 1, %d events)\n\n", o.events))
	emit("| queue | mode | BatchSize | events/s | CPU µs per event |\n|---|---|---:|---:|---:|\n")
	for _, mode := range []drainer.ClaimMode{drainer.ClaimLease, drainer.ClaimLock} {
		for _, partitioned := range []bool{false, true} {
			for _, size := range []int{32, 256, 1000} {
				c := drainCase{replicas: 4, concurrency: 1, partitioned: partitioned, mode: mode, batchSize: size}
				rates, cpus, err := drainRuns(ctx, pool, c, o, &run)
				if err != nil {
					return fmt.Errorf("%s batch %d: %w", c, size, err)
				}
				p := "unpartitioned"
				if partitioned {
					p = "partitioned"
				}
				emit(fmt.Sprintf("| %s | %s | %d | %s | %s |\n", p, mode, size, summarize(rates).format("%.0f"),
					summarize(cpus).format("%.0f")))
			}
		}
	}
	emit("\n")
	return nil
}
