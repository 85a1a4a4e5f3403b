package main

import (
	"context"
	"fmt"

	"github.com/pgdrain/pgdrain/drainer"
)

// Section 2c (-sections runs): claim runs (issue 28, drainer.Config.RunLength): the same ordered
// drain with the seed's claim (one row per partition) and with runs of up to 8 rows per partition,
// for the drain section's shape (about 6 rows per key, 4 replicas, BatchSize 32 and 256) and for
// hot keys (8 keys, one replica, hotKeyEvents events: with one row per key per claim each key moves
// once per claim and result, so the rate is small and the count must be).
const hotKeyEvents = 5000

func benchRuns(ctx context.Context, o options, emit func(string)) error {
	pool, err := freshDatabase(ctx, o.server, "bench_runs", true, 24)
	if err != nil {
		return err
	}
	defer pool.Close()
	emit(fmt.Sprintf("## 2c. Claim runs (Config.RunLength), partitioned queue, ApplyConcurrency 1\n\n"+
		"events/s and the machine's CPU µs per event, median (min–max) of %d runs.\n\n", o.runs))
	emit("| keys | events | replicas | BatchSize | mode | RunLength | events/s | CPU µs per event |\n|---|---:|---:|---:|---|---:|---:|---:|\n")
	run := 0
	shapes := []struct {
		label                   string
		keys, n, replica, batch int
	}{
		{"~6 rows each", 0, o.events, 4, 32},
		{"~6 rows each", 0, o.events, 4, 256},
		{"8 hot keys", 8, min(o.events, hotKeyEvents), 1, 32},
	}
	for _, s := range shapes {
		for _, mode := range []drainer.ClaimMode{drainer.ClaimLease, drainer.ClaimLock} {
			for _, runLength := range []int{1, 8} {
				c := drainCase{replicas: s.replica, concurrency: 1, partitioned: true, mode: mode, runLength: runLength, keys: s.keys,
					batchSize: s.batch}
				rates, cpus, err := drainRunsOf(ctx, pool, c, s.n, o.runs, &run)
				if err != nil {
					return fmt.Errorf("%s run length %d: %w", c, runLength, err)
				}
				emit(fmt.Sprintf("| %s | %d | %d | %d | %s | %d | %s | %s |\n", s.label, s.n, s.replica, s.batch, mode, runLength,
					summarize(rates).format("%.0f"), summarize(cpus).format("%.0f")))
			}
		}
	}
	emit("\n")
	return nil
}
