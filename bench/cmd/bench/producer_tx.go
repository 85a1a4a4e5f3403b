package main

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// benchStatementsPerTransaction: the cost per row of one transaction of n single-row INSERT
// statements (100 keys), with the triggers and bare, as n grows: flat means a statement costs the
// same whatever the transaction wrote before it.
func benchStatementsPerTransaction(ctx context.Context, pool *pgxpool.Pool, o options, emit func(string)) error {
	emit(fmt.Sprintf("Cost per row of one transaction of n single-row INSERT statements into a partitioned queue "+
		"(100 keys, sent in one pipeline), µs per row including the COMMIT, median (min–max) of %d runs:\n\n", o.runs))
	emit("| statements | with triggers | bare | with − bare |\n|---:|---:|---:|---:|\n")
	for i, n := range []int{10, 100, 1000, 10_000} {
		var with, bare []float64
		for _, triggers := range []bool{true, false} {
			q := fmt.Sprintf("public.produce_stmts_%d_%t", i, triggers)
			if err := newProducerQueue(ctx, pool, q, producerShape{partitioned: true}, triggers); err != nil {
				return err
			}
			for range o.runs {
				us, err := statementsOnce(ctx, pool, q, n)
				if err != nil {
					return fmt.Errorf("%d statements into %s: %w", n, q, err)
				}
				if triggers {
					with = append(with, us)
				} else {
					bare = append(bare, us)
				}
			}
			if err := execAll(ctx, pool, fmt.Sprintf("SELECT outbox.drop_queue('%s', true)", q)); err != nil {
				return err
			}
		}
		w, b := summarize(with), summarize(bare)
		emit(fmt.Sprintf("| %d | %s | %s | %.1f |\n", n, w.format("%.1f"), b.format("%.1f"), w.median-b.median))
	}
	emit("\n")
	return nil
}

func statementsOnce(ctx context.Context, pool *pgxpool.Pool, q string, n int) (float64, error) {
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return 0, err
	}
	defer conn.Release()
	start := time.Now()
	tx, err := conn.Begin(ctx)
	if err != nil {
		return 0, err
	}
	defer func() { _ = tx.Rollback(ctx) }()
	batch := &pgx.Batch{}
	for i := range n {
		batch.Queue(fmt.Sprintf(`INSERT INTO %s (event_type, payload, resource_id) VALUES ('evt', '{}', $1)`, q),
			fmt.Sprintf("key-%d", i%100))
	}
	if err := tx.SendBatch(ctx, batch).Close(); err != nil {
		return 0, err
	}
	if err := tx.Commit(ctx); err != nil {
		return 0, err
	}
	return float64(time.Since(start).Microseconds()) / float64(n), nil
}

// benchLateBulk: a 20,000-row transaction over 2,000 keys commits after another producer committed
// a row of each of its keys, so every one of its rows is renumbered at COMMIT. Its COMMIT time,
// and the slowest single-row transaction of a producer of another key running meanwhile.
func benchLateBulk(ctx context.Context, pool *pgxpool.Pool, o options, emit func(string)) error {
	emit(fmt.Sprintf("A late bulk transaction: 20,000 rows over 2,000 keys, all renumbered at COMMIT because another "+
		"producer committed a row of each key first; median (min–max) of %d runs:\n\n", o.runs))
	var commits, blocked, bare []float64
	for run := range o.runs {
		q := fmt.Sprintf("public.produce_late_%d", run)
		if err := newProducerQueue(ctx, pool, q, producerShape{partitioned: true, newKeys: true}, true); err != nil {
			return err
		}
		commitMs, otherMs, err := lateBulkOnce(ctx, pool, q)
		if err != nil {
			return fmt.Errorf("late bulk into %s: %w", q, err)
		}
		bareMs, err := bareRenumberMs(ctx, pool, q)
		if err != nil {
			return fmt.Errorf("bare update beside %s: %w", q, err)
		}
		commits = append(commits, commitMs)
		blocked = append(blocked, otherMs)
		bare = append(bare, bareMs)
		if err := execAll(ctx, pool, fmt.Sprintf("SELECT outbox.drop_queue('%s', true)", q)); err != nil {
			return err
		}
	}
	ratios := make([]float64, len(commits))
	for i := range commits {
		ratios[i] = commits[i] / bare[i]
	}
	emit("| COMMIT of the late transaction (ms) | bare UPDATE of the same 20,000 ids (ms) | late / bare | " +
		"slowest single-row transaction of another key meanwhile (ms) |\n|---:|---:|---:|---:|\n")
	emit(fmt.Sprintf("| %s | %s | %s | %s |\n\n", summarize(commits).format("%.0f"), summarize(bare).format("%.0f"),
		summarize(ratios).format("%.2f"), summarize(blocked).format("%.1f")))
	return nil
}

// bareRenumberMs is what renumbering the late transaction's rows costs without pgdrain: a copy of
// the queue table (its columns, indexes and checks, no trigger) holding 20,000 rows like the late
// transaction's, all given new ids from its sequence by one UPDATE, timed with its COMMIT.
func bareRenumberMs(ctx context.Context, pool *pgxpool.Pool, q string) (float64, error) {
	bare := q + "_bare"
	if err := execAll(ctx, pool,
		fmt.Sprintf("DROP TABLE IF EXISTS %s", bare),
		fmt.Sprintf("CREATE TABLE %s (LIKE %s INCLUDING ALL)", bare, q),
		fmt.Sprintf(`INSERT INTO %s (event_type, payload, resource_id)
			SELECT 'late', '{}', 'late-' || (g %% 2000) FROM generate_series(1, 20000) g`, bare),
		fmt.Sprintf("ANALYZE %s", bare)); err != nil {
		return 0, err
	}
	tx, err := pool.Begin(ctx)
	if err != nil {
		return 0, err
	}
	defer func() { _ = tx.Rollback(ctx) }()
	start := time.Now()
	if _, err := tx.Exec(ctx, fmt.Sprintf(`UPDATE %[1]s SET id = nextval(pg_get_serial_sequence('%[1]s', 'id'))
		WHERE id BETWEEN 1 AND 20000`, bare)); err != nil {
		return 0, err
	}
	if err := tx.Commit(ctx); err != nil {
		return 0, err
	}
	ms := float64(time.Since(start).Microseconds()) / 1000
	return ms, execAll(ctx, pool, fmt.Sprintf("DROP TABLE %s", bare))
}

func lateBulkOnce(ctx context.Context, pool *pgxpool.Pool, q string) (commitMs, otherMs float64, err error) {
	late, err := pool.Begin(ctx)
	if err != nil {
		return 0, 0, err
	}
	defer func() { _ = late.Rollback(ctx) }()
	if _, err := late.Exec(ctx, fmt.Sprintf(`INSERT INTO %s (event_type, payload, resource_id)
		SELECT 'late', '{}', 'late-' || (g %% 2000) FROM generate_series(1, 20000) g`, q)); err != nil {
		return 0, 0, err
	}
	if _, err := pool.Exec(ctx, fmt.Sprintf(`INSERT INTO %s (event_type, payload, resource_id)
		SELECT 'early', '{}', 'late-' || g FROM generate_series(0, 1999) g`, q)); err != nil {
		return 0, 0, err
	}
	// Another producer, of another key, in a loop while the late transaction commits.
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var worst []float64
	var otherErr error
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			t := time.Now()
			if _, err := pool.Exec(ctx, fmt.Sprintf(`INSERT INTO %s (event_type, payload, resource_id) VALUES ('other', '{}', 'other')`, q)); err != nil {
				otherErr = err
				return
			}
			worst = append(worst, float64(time.Since(t).Microseconds())/1000)
		}
	}()
	time.Sleep(20 * time.Millisecond)
	start := time.Now()
	err = late.Commit(ctx)
	commitMs = float64(time.Since(start).Microseconds()) / 1000
	time.Sleep(20 * time.Millisecond)
	close(stop)
	wg.Wait()
	if err != nil {
		return 0, 0, err
	}
	if otherErr != nil {
		return 0, 0, otherErr
	}
	if len(worst) == 0 {
		return commitMs, 0, nil
	}
	return commitMs, slices.Max(worst), nil
}
