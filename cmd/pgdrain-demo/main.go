// Command pgdrain-demo is `make demo`: pgdrain's main job in one run.
//
// On the PostgreSQL server of DATABASE_URL (make demo starts a throwaway cluster) it creates a
// fresh database pgdrain_demo, applies the embedded migrations, creates a partitioned queue, writes
// 20,000 events over 500 accounts inside business transactions, and drains them with 3 drainer
// replicas into a local webhook peer that fails 10% of calls transiently and rejects one malformed
// event for good. A fourth, stalled drainer shows fencing: its late result is refused and the row
// is delivered by the next holder. Then the escalation ladder pages for the poisoned event. It
// prints a live progress line and a final report, and exits 0 only when every check of the report
// holds.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"
)

// settings are the demo's knobs; the defaults are the documented demo.
type settings struct {
	events, keys, replicas, producers int
	failRate                          float64
	timeout                           time.Duration
}

func main() {
	var s settings
	flag.IntVar(&s.events, "events", 20000, "events to write")
	flag.IntVar(&s.keys, "keys", 500, "accounts (partition keys)")
	flag.IntVar(&s.replicas, "replicas", 3, "drainer replicas")
	flag.IntVar(&s.producers, "producers", 4, "concurrent producers (each owns a share of the accounts)")
	flag.Float64Var(&s.failRate, "fail-rate", 0.10, "share of peer calls that fail transiently")
	flag.DurationVar(&s.timeout, "timeout", 110*time.Second, "give up (and fail) after this long")
	flag.Parse()
	if s.events < 100 || s.keys < 10 || s.keys > s.events || s.replicas < 1 || s.producers < 1 || s.producers > s.keys ||
		s.failRate < 0 || s.failRate >= 0.5 {
		fmt.Fprintln(os.Stderr, "pgdrain-demo: need events >= 100, 10 <= keys <= events, replicas >= 1, 1 <= producers <= keys, 0 <= fail-rate < 0.5")
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, s, os.Stdout)
	stop()
	os.Exit(code)
}

func run(ctx context.Context, s settings, out *os.File) int {
	server := os.Getenv("DATABASE_URL")
	if server == "" {
		fmt.Fprintln(os.Stderr, "pgdrain-demo: DATABASE_URL is not set; run `make demo`, which starts a throwaway PostgreSQL")
		return 2
	}
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	// Drainer and engine warnings would tear the live line; errors still show.
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))
	r, err := demo(ctx, s, server, out, logger)
	if err != nil {
		fmt.Fprintf(os.Stderr, "\npgdrain-demo: %v\n", err)
		return 1
	}
	r.print(out)
	if !r.passed() {
		return 1
	}
	return 0
}

func step(out io.Writer, format string, args ...any) {
	fmt.Fprintf(out, "== "+format+"\n", args...)
}
