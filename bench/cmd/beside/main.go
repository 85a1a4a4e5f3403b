// beside runs Go drainers (no-op Applier) on one queue until it is interrupted or -for runs out, so
// that a producer benchmark can run beside them (bench/producer-beside-drainers.sh). It prints how
// many events it delivered.
//
//	go run ./cmd/beside -table public.bd_events -replicas 3 -mode lease -for 30s
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgdrain/pgdrain/drainer"
)

func main() {
	dsn := flag.String("dsn", os.Getenv("DATABASE_URL"), "PostgreSQL URL")
	table := flag.String("table", "public.bd_events", "queue")
	replicas := flag.Int("replicas", 1, "drainers in this process, each with its own pool")
	mode := flag.String("mode", "lease", "lease or lock")
	concurrency := flag.Int("concurrency", 8, "ApplyConcurrency of each drainer")
	busyPoll := flag.Duration("busy-poll", 0, "drainer.Config.BusyPoll (0: default, negative: off)")
	trickle := flag.Duration("trickle", 0, "drainer.Config.TrickleInterval (0: default, negative: off)")
	runFor := flag.Duration("for", time.Hour, "stop after this long")
	asyncResults := flag.Bool("async-results", false, "drainer.Config.AsyncResults (lease mode)")
	flag.Parse()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, *runFor)
	defer cancel()
	claimMode := drainer.ClaimLease
	if *mode == "lock" {
		claimMode = drainer.ClaimLock
	}
	var delivered atomic.Int64
	apply := func(context.Context, string, json.RawMessage) error { delivered.Add(1); return nil }
	var wg sync.WaitGroup
	for range *replicas {
		pool, err := pgxpool.New(ctx, *dsn)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		d, err := drainer.New(pool, drainer.Config{Table: *table, ClaimMode: claimMode, ApplyConcurrency: *concurrency,
			BusyPoll: *busyPoll, TrickleInterval: *trickle, AsyncResults: *asyncResults && claimMode == drainer.ClaimLease},
			func(b []byte) (json.RawMessage, error) { return b, nil }, apply,
			drainer.WithLogger[json.RawMessage](slog.New(slog.NewTextHandler(io.Discard, nil))))
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer pool.Close()
			if err := d.Run(ctx); err != nil {
				fmt.Fprintln(os.Stderr, err)
			}
		}()
	}
	wg.Wait()
	fmt.Printf("delivered %d\n", delivered.Load())
}
