// Command bench measures pgdrain against itself and its peers on one PostgreSQL server and prints
// markdown tables (medians of several runs with min–max) plus a PNG chart of claim cost vs
// backlog depth into an output directory. Run it through `make bench`, which starts a throwaway
// cluster with fsync on and sets DATABASE_URL.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// options are the command-line settings of one benchmark run.
type options struct {
	server   string
	out      string
	runs     int
	maxDepth int
	events   int
	produce  time.Duration
	sections string
	// depth section (depth.go)
	depthScale     float64
	depthWindow    time.Duration
	depthBatches   string
	depthLargeRuns int
	depthFocus     string
	depth6aOnly    bool
	// pipeline section (pipeline.go)
	pipelineEvents int
	pipelineWindow time.Duration
	// relay section (relay.go)
	relayEvents int
	relayWindow time.Duration
}

func main() {
	var o options
	flag.StringVar(&o.server, "dsn", os.Getenv("DATABASE_URL"), "PostgreSQL server URL (defaults to $DATABASE_URL)")
	flag.StringVar(&o.out, "out", "bench/out", "directory for results.md and claim_cost.png")
	flag.IntVar(&o.runs, "runs", 3, "runs per measurement (the median and min–max are reported)")
	flag.IntVar(&o.maxDepth, "max-depth", 1_000_000, "deepest backlog for the claim-cost table")
	flag.IntVar(&o.events, "events", 20_000, "events per drain-throughput run")
	flag.DurationVar(&o.produce, "produce-for", 2*time.Second, "duration of one producer-cost run")
	flag.StringVar(&o.sections, "sections", "claim,drain,runs,peers,producer,depth,pipeline,relay,fanout", "sections to run (floors: only section 3's raw-SQL floors; producer-tx: only the producer section's tables of whole transactions)")
	flag.Float64Var(&o.depthScale, "depth-scale", 1, "depth section: multiplies every event count (20k, 200k, 1M); below 1 for development")
	flag.DurationVar(&o.depthWindow, "depth-window", 5*time.Second, "depth section: shortest measurement (shorter drains are repeated)")
	flag.StringVar(&o.depthBatches, "depth-batches", "32", "depth section: claim configurations of 6a, comma-separated: 32 (ApplyConcurrency 32), 64 (ApplyConcurrency 64) and/or 256 (BatchSize 256, ApplyConcurrency 1); the first one is used for 6b-6d")
	flag.IntVar(&o.depthLargeRuns, "depth-large-runs", 0, "depth section: runs of the 1,000,000-event drains (0 = -runs)")
	flag.BoolVar(&o.depth6aOnly, "depth-6a-only", false, "depth section: only 6a (depth and replicas), for development")
	flag.StringVar(&o.depthFocus, "depth-focus", "lease,lock", "depth section: claim modes of the 4-replica 200,000-event drains of 6b-6d")
	flag.IntVar(&o.pipelineEvents, "pipeline-events", 100_000, "pipeline section: pre-filled events per run (more than the fastest drain sends in a run)")
	flag.DurationVar(&o.pipelineWindow, "pipeline-window", 5*time.Second, "pipeline section: measurement window of one run (after a 1s warm-up)")
	flag.IntVar(&o.relayEvents, "relay-events", 100_000, "relay section: pre-filled events per run (more than the fastest relay sends in a run)")
	flag.DurationVar(&o.relayWindow, "relay-window", 5*time.Second, "relay section: measurement window of one run (after a 1s warm-up)")
	flag.Parse()
	if o.server == "" {
		fmt.Fprintln(os.Stderr, "bench: set DATABASE_URL or -dsn")
		os.Exit(2)
	}
	// The drainer logs at info level per start and stop; the tables are the output here.
	slog.SetDefault(slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err := run(context.Background(), o); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, o options) error {
	if err := os.MkdirAll(o.out, 0o755); err != nil {
		return err
	}
	var report strings.Builder
	emit := func(s string) {
		fmt.Print(s)
		report.WriteString(s)
	}
	emit(fmt.Sprintf("# pgdrain bench (%s)\n\n", time.Now().UTC().Format(time.RFC3339)))
	if err := describeServer(ctx, o.server, emit); err != nil {
		return err
	}
	started := time.Now()
	want := func(s string) bool { return strings.Contains(","+o.sections+",", ","+s+",") }
	if want("claim") {
		if err := benchClaimCost(ctx, o, emit); err != nil {
			return fmt.Errorf("claim cost: %w", err)
		}
	}
	if want("drain") {
		if err := benchDrain(ctx, o, emit); err != nil {
			return fmt.Errorf("drain throughput: %w", err)
		}
	}
	if want("runs") {
		if err := benchRuns(ctx, o, emit); err != nil {
			return fmt.Errorf("claim runs: %w", err)
		}
	}
	if want("floors") && !want("peers") {
		emit("## 3. Raw-SQL floors\n\n| system | settings | events/s | CPU µs per event |\n|---|---|---:|---:|\n")
		if err := floorRows(ctx, o, emit); err != nil {
			return fmt.Errorf("floors: %w", err)
		}
	}
	if want("peers") {
		if err := benchPeers(ctx, o, emit); err != nil {
			return fmt.Errorf("peers: %w", err)
		}
	}
	if want("producer") {
		if err := benchProducers(ctx, o, emit); err != nil {
			return fmt.Errorf("producer cost: %w", err)
		}
	} else if want("producer-tx") { // only the transactions of many statements and the late bulk one
		if err := benchProducerTransactions(ctx, o, emit); err != nil {
			return fmt.Errorf("producer transactions: %w", err)
		}
	}
	if want("depth") {
		if err := benchDepth(ctx, o, emit); err != nil {
			return fmt.Errorf("depth: %w", err)
		}
	}
	if want("pipeline") {
		if err := benchPipeline(ctx, o, emit); err != nil {
			return fmt.Errorf("pipeline: %w", err)
		}
	}
	if want("relay") {
		if err := benchRelay(ctx, o, emit); err != nil {
			return fmt.Errorf("relay: %w", err)
		}
	}
	if want("fanout") {
		if err := benchFanOut(ctx, o, emit); err != nil {
			return fmt.Errorf("fan-out: %w", err)
		}
	}
	emit(fmt.Sprintf("\nTotal bench time: %s\n", time.Since(started).Round(time.Second)))
	return os.WriteFile(filepath.Join(o.out, "results.md"), []byte(report.String()), 0o644)
}
