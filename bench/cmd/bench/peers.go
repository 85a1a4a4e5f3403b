package main

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"

	"github.com/pgdrain/pgdrain/bench/internal/cpustat"
)

// Section 3: the same workload through River (no-op worker), Graphile Worker (no-op task, Node.js;
// see graphile.go) and through a raw-SQL floor: one hand-written claim statement and one ack
// statement per 32-row batch, no functions, triggers or NOTIFY, on the same server in the same run.

// noopArgs is the River job of the benchmark.
type noopArgs struct {
	N int `json:"n"`
}

func (noopArgs) Kind() string { return "noop" }

type noopWorker struct {
	river.WorkerDefaults[noopArgs]
}

func (noopWorker) Work(context.Context, *river.Job[noopArgs]) error { return nil }

// riverSettings are River's bench settings as issue 5 quotes them (FetchCooldown 2 ms,
// FetchPollInterval 20 ms, 100–1,000 workers).
const riverWorkers = 1000

// riverOnce drains n pre-inserted River jobs and returns the rate (jobs/s) and the machine's CPU per
// job (µs, every core; cpustat.Span).
func riverOnce(ctx context.Context, pool *pgxpool.Pool, n int) (float64, float64, error) {
	if err := execAll(ctx, pool, "TRUNCATE river_job"); err != nil {
		return 0, 0, err
	}
	workers := river.NewWorkers()
	river.AddWorker(workers, noopWorker{})
	client, err := river.NewClient(riverpgxv5.New(pool), &river.Config{
		FetchCooldown:     2 * time.Millisecond,
		FetchPollInterval: 20 * time.Millisecond,
		Queues:            map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: riverWorkers}},
		Workers:           workers,
		Logger:            nil,
	})
	if err != nil {
		return 0, 0, err
	}
	for done := 0; done < n; done += 5000 {
		params := make([]river.InsertManyParams, 0, 5000)
		for i := done; i < min(done+5000, n); i++ {
			params = append(params, river.InsertManyParams{Args: noopArgs{N: i}})
		}
		if _, err := client.InsertManyFast(ctx, params); err != nil {
			return 0, 0, err
		}
	}
	if err := execAll(ctx, pool, "VACUUM ANALYZE river_job", settleFill); err != nil {
		return 0, 0, err
	}
	start := time.Now()
	span := cpustat.Start()
	if err := client.Start(ctx); err != nil {
		return 0, 0, err
	}
	deadline := time.Now().Add(5 * time.Minute)
	var end time.Time
	var cpu float64
	for {
		var left bool
		if err := pool.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM river_job WHERE state <> 'completed')").Scan(&left); err != nil {
			return 0, 0, err
		}
		if !left {
			end = time.Now()
			cpu = span.PerEvent(n)
			break
		}
		if time.Now().After(deadline) {
			return 0, 0, fmt.Errorf("river did not finish %d jobs in 5 minutes", n)
		}
		time.Sleep(5 * time.Millisecond)
	}
	stopCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := client.Stop(stopCtx); err != nil {
		return 0, 0, err
	}
	return float64(n) / end.Sub(start).Seconds(), cpu, nil
}

func benchPeers(ctx context.Context, o options, emit func(string)) error {
	emit(fmt.Sprintf("## 3. Peers on the same server: raw-SQL floor, River and Graphile Worker\n\n%d events, median (min–max) of %d runs; CPU µs per event as in section 2 (the whole machine's, every core).\n\n", o.events, o.runs))
	emit("| system | settings | events/s | CPU µs per event |\n|---|---|---:|---:|\n")
	if err := floorRows(ctx, o, emit); err != nil {
		return err
	}
	riverPool, err := freshDatabase(ctx, o.server, "bench_river", false, 40)
	if err != nil {
		return err
	}
	defer riverPool.Close()
	migrator, err := rivermigrate.New(riverpgxv5.New(riverPool), nil)
	if err != nil {
		return err
	}
	if _, err := migrator.Migrate(ctx, rivermigrate.DirectionUp, nil); err != nil {
		return fmt.Errorf("migrating river: %w", err)
	}
	var rates, cpus []float64
	for range o.runs {
		r, cpu, err := riverOnce(ctx, riverPool, o.events)
		if err != nil {
			return fmt.Errorf("river: %w", err)
		}
		rates, cpus = append(rates, r), append(cpus, cpu)
	}
	emit(fmt.Sprintf("| River v0.51.2, no-op worker | FetchCooldown 2ms, FetchPollInterval 20ms, MaxWorkers %d, pool 40, jobs pre-inserted with InsertManyFast | %s | %s |\n",
		riverWorkers, summarize(rates).format("%.0f"), summarize(cpus).format("%.0f")))
	benchGraphile(ctx, o, emit)
	emit("\n")
	return nil
}
