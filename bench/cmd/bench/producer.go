package main

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// Section 4: producer cost. Inserts/s into a partitioned queue table with pgdrain's triggers
// (statement-level NOTIFY and partition heads) against an identical table whose two triggers
// were dropped, for single-row and 100-row transactions and 1 and 8 producers.

func produceOnce(ctx context.Context, pool *pgxpool.Pool, q string, producers, rowsPerTx int, d time.Duration, keys int) (float64, error) {
	var rows atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, producers)
	stop := time.Now().Add(d)
	sql := fmt.Sprintf(`INSERT INTO %s (event_type, payload, resource_id)
		SELECT 'evt', jsonb_build_object('n', g, 'pad', repeat('x', 80)), 'key-' || ((g + $1) %% %d)
		FROM generate_series(1, %d) g`, q, keys, rowsPerTx)
	start := time.Now()
	for p := range producers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; time.Now().Before(stop); i++ {
				if _, err := pool.Exec(ctx, sql, p*1_000_003+i*rowsPerTx); err != nil {
					errs <- err
					return
				}
				rows.Add(int64(rowsPerTx))
			}
		}()
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return 0, err
	}
	return float64(rows.Load()) / time.Since(start).Seconds(), nil
}

func benchProducers(ctx context.Context, o options, emit func(string)) error {
	pool, err := freshDatabase(ctx, o.server, "bench_produce", true, 16)
	if err != nil {
		return err
	}
	defer pool.Close()
	emit(fmt.Sprintf("## 4. Producer cost of the triggers\n\nRows inserted per second for %s per run, median (min–max) of %d runs; "+
		"partitioned queue over 10,000 keys, plain INSERT ... SELECT statements, one transaction each. "+
		"\"bare\" is the same table (same columns and indexes) with the NOTIFY and heads triggers dropped (so also no commit step).\n\n", o.produce, o.runs))
	emit("| producers | rows/tx | with triggers | bare | overhead |\n|---:|---:|---:|---:|---:|\n")
	run := 0
	for _, rowsPerTx := range []int{1, 100} {
		for _, producers := range []int{1, 8} {
			var with, bare []float64
			for range o.runs {
				for _, triggers := range []bool{true, false} {
					run++
					q := fmt.Sprintf("public.produce_%d", run)
					if err := execAll(ctx, pool, fmt.Sprintf("SELECT outbox.create_queue('%s', 'resource_id')", q)); err != nil {
						return err
					}
					if !triggers {
						if err := execAll(ctx, pool, "DROP TRIGGER pgdrain_notify ON "+q, "DROP TRIGGER pgdrain_heads ON "+q); err != nil {
							return err
						}
					}
					r, err := produceOnce(ctx, pool, q, producers, rowsPerTx, o.produce, 10_000)
					if err != nil {
						return fmt.Errorf("producing into %s: %w", q, err)
					}
					if triggers {
						with = append(with, r)
					} else {
						bare = append(bare, r)
					}
					if err := execAll(ctx, pool, fmt.Sprintf("SELECT outbox.drop_queue('%s', true)", q)); err != nil {
						return err
					}
				}
			}
			w, b := summarize(with), summarize(bare)
			emit(fmt.Sprintf("| %d | %d | %s | %s | %.0f%% |\n", producers, rowsPerTx, w.format("%.0f"), b.format("%.0f"),
				(1-w.median/b.median)*100))
		}
	}
	emit("\n")
	return nil
}
