// drainprobe is a development aid for issue 12: it fills one partitioned queue (about 6 events per
// key, keys interleaved, as the bench's depth section does) in a fresh database named probe on the
// server of -dsn, drains it with the package drainer, and prints the drain's rate (every 2 s with
// -v, with the dead tuples of the heads and queue tables) and the buffers of a claim sampled on a
// session without a cursor before the drain and at 5%, 50% and 95% of it, then what the drain
// cost: WAL bytes, records and commits per event, rows per claim and per result call, commits per
// WAL flush (the probe's sessions set track_functions and track_wal_io_timing: its dsn must be a
// superuser's), and the machine's CPU busy share and CPU time per event (/proc/stat, every core).
// -sql applies a file after the migrations (to try a function's variant side by side). Not part of
// make bench.
//
//	scripts/with-postgres.sh --fsync -- bash -c 'cd bench && go run ./cmd/drainprobe -n 200000 -replicas 4'

package main

import (
	"cmp"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"runtime"
	"runtime/pprof"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgdrain/pgdrain/bench/internal/cpustat"
	"github.com/pgdrain/pgdrain/drainer"
	"github.com/pgdrain/pgdrain/internal/testdb"
)

func main() {
	dsn := flag.String("dsn", os.Getenv("DATABASE_URL"), "")
	n := flag.Int("n", 200000, "events")
	replicas := flag.Int("replicas", 1, "")
	mode := flag.String("mode", "lease", "")
	hold := flag.Bool("hold", false, "hold an xid")
	fresh := flag.Bool("fresh", true, "recreate database probe")
	q := flag.String("q", "public.probe", "")
	verbose := flag.Bool("v", false, "print every 2 s")
	concurrency := flag.Int("concurrency", 32, "ApplyConcurrency of each replica")
	batch := flag.Int("batch", 32, "BatchSize of each replica (ApplyConcurrency above 1 overrides it)")
	run := flag.Int("run", 1, "RunLength of each replica")
	keys := flag.Int("keys", 0, "partition keys (0: events/6)")
	extra := flag.String("sql", "", "SQL file applied after the migrations")
	unpartitioned := flag.Bool("unpartitioned", false, "register the queue without a partition column (no per-key order)")
	cpuProfile := flag.String("cpuprofile", "", "write the drainers' Go CPU profile of the drain to this file")
	explainNested := flag.Bool("explain", false, "print the plans of every statement a sampled claim runs (auto_explain)")
	fillfactor := flag.Int("fillfactor", 0, "the queue table's fillfactor before the fill (0: the table's default)")
	payloadBytes := flag.Int("payload", 0, "add this many bytes of hex digits to each payload (0: an 80-byte pad); above about 2 kB a payload is stored out of line")
	asyncResults := flag.Bool("async-results", false, "drainer.Config.AsyncResults (lease mode)")
	flag.Parse()
	ctx := context.Background()
	db := *dsn
	if *fresh {
		admin, err := pgx.Connect(ctx, db)
		must(err)
		_, err = admin.Exec(ctx, "DROP DATABASE IF EXISTS probe WITH (FORCE)")
		must(err)
		_, err = admin.Exec(ctx, "CREATE DATABASE probe")
		must(err)
		admin.Close(ctx)
	}
	cfg, _ := pgxpool.ParseConfig(db)
	cfg.ConnConfig.Database = "probe"
	if *fresh {
		must(testdb.MigrateUp(ctx, probeURL(*dsn)))
	}
	if *extra != "" {
		b, err := os.ReadFile(*extra)
		must(err)
		c, err := pgx.Connect(ctx, probeURL(*dsn))
		must(err)
		_, err = c.Exec(ctx, string(b))
		must(err)
		c.Close(ctx)
	}
	cfg.MaxConns = 24
	// Counted by the drainers' own sessions (both need a superuser, as the probe's dsn is).
	cfg.ConnConfig.RuntimeParams["track_functions"] = "pl"
	cfg.ConnConfig.RuntimeParams["track_wal_io_timing"] = "on"
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	must(err)
	exec := func(s string) {
		_, err := pool.Exec(ctx, s)
		must(err)
	}
	if *unpartitioned {
		exec(fmt.Sprintf("SELECT outbox.create_queue('%s')", *q))
	} else {
		exec(fmt.Sprintf("SELECT outbox.create_queue('%s', 'resource_id')", *q))
	}
	if *fillfactor > 0 {
		exec(fmt.Sprintf("ALTER TABLE %s SET (fillfactor = %d)", *q, *fillfactor))
	}
	t0 := time.Now()
	if *unpartitioned {
		exec(fmt.Sprintf(`INSERT INTO %s (event_type, payload)
			SELECT 'evt', jsonb_build_object('n', g, 'pad', %s) FROM generate_series(1, %d) g`, *q, pad(*payloadBytes), *n))
	} else {
		exec(fmt.Sprintf(`INSERT INTO %s (event_type, payload, resource_id)
			SELECT 'evt', jsonb_build_object('n', g, 'pad', %s), 'key-' || (g %% %d) FROM generate_series(1, %d) g`, *q, pad(*payloadBytes), cmp.Or(*keys, max(*n/6, 1)), *n))
	}
	exec("VACUUM ANALYZE " + *q)
	fmt.Printf("filled in %s\n", time.Since(t0).Round(time.Millisecond))
	if *hold {
		c, err := pool.Acquire(ctx)
		must(err)
		_, err = c.Exec(ctx, "BEGIN")
		must(err)
		_, err = c.Exec(ctx, "SELECT txid_current()")
		must(err)
		defer c.Release()
	}
	var applied atomic.Int64
	scfg, err := pgx.ParseConfig(probeURL(*dsn))
	must(err)
	var notices strings.Builder
	scfg.OnNotice = func(_ *pgconn.PgConn, n *pgconn.Notice) { notices.WriteString(n.Message + "\n") }
	sampler, err := pgx.ConnectConfig(ctx, scfg)
	must(err)
	if *explainNested {
		for _, set := range []string{"LOAD 'auto_explain'", "SET auto_explain.log_min_duration = 0",
			"SET auto_explain.log_nested_statements = on", "SET auto_explain.log_analyze = on",
			"SET auto_explain.log_buffers = on", "SET auto_explain.log_level = notice"} {
			_, err := sampler.Exec(ctx, set)
			must(err)
		}
	}
	sample := func(label string) {
		tx, err := sampler.Begin(ctx)
		must(err)
		defer tx.Rollback(ctx)
		var raw []byte
		fn := "claim_batch"
		if *mode == "lock" {
			fn = "claim_locked"
		}
		must(tx.QueryRow(ctx, fmt.Sprintf("EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) SELECT * FROM outbox.%s('%s', 32)", fn, *q)).Scan(&raw))
		var out []struct {
			Plan struct {
				Hit  float64 `json:"Shared Hit Blocks"`
				Read float64 `json:"Shared Read Blocks"`
				Rows int     `json:"Actual Rows"`
			} `json:"Plan"`
			Time float64 `json:"Execution Time"`
		}
		must(json.Unmarshal(raw, &out))
		fmt.Printf("claim sample %-8s %6.0f buffers %2d rows %.2f ms\n", label, out[0].Plan.Hit+out[0].Plan.Read, out[0].Plan.Rows, out[0].Time)
		if *explainNested {
			fmt.Print(notices.String())
		}
		notices.Reset()
	}
	sample("warm")
	sample("static")
	fractions := []float64{0.05, 0.5, 0.95}
	m := drainer.ClaimLease
	if *mode == "lock" {
		m = drainer.ClaimLock
	}
	dc := drainer.Config{Table: *q, ClaimMode: m, PollFallback: time.Second, BatchSize: *batch, ApplyConcurrency: *concurrency, RunLength: *run, AsyncResults: *asyncResults && m == drainer.ClaimLease}
	runCtx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	before := walCounters(ctx, pool)
	cpuBefore := cpustat.Read()
	selfBefore := processCPU()
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		must(err)
		must(pprof.StartCPUProfile(f))
		defer pprof.StopCPUProfile()
	}
	start := time.Now()
	for range *replicas {
		d, err := drainer.New(pool, dc, func(b []byte) (json.RawMessage, error) { return b, nil },
			func(context.Context, string, json.RawMessage) error { applied.Add(1); return nil })
		must(err)
		wg.Add(1)
		go func() { defer wg.Done(); _ = d.Run(runCtx) }()
	}
	last, lastT := int64(0), start
	for applied.Load() < int64(*n) {
		for i := 0; i < 40 && applied.Load() < int64(*n) && !(len(fractions) > 0 && float64(applied.Load()) >= fractions[0]*float64(*n)); i++ {
			time.Sleep(50 * time.Millisecond)
		}
		a := applied.Load()
		for len(fractions) > 0 && float64(a) >= fractions[0]*float64(*n) {
			sample(fmt.Sprintf("%.0f%%", 100*fractions[0]))
			fractions = fractions[1:]
		}
		var dead, live, vac int64
		_ = pool.QueryRow(ctx, `SELECT n_dead_tup, n_live_tup, autovacuum_count FROM pg_stat_user_tables WHERE relname='partition_heads'`).Scan(&dead, &live, &vac)
		var qdead, qvac int64
		_ = pool.QueryRow(ctx, `SELECT n_dead_tup, autovacuum_count FROM pg_stat_user_tables WHERE relid=$1::regclass`, *q).Scan(&qdead, &qvac)
		if *verbose {
			fmt.Printf("%5.1fs applied %7d  rate %6.0f/s  heads dead %d live %d av %d  queue dead %d av %d\n",
				time.Since(start).Seconds(), a, float64(a-last)/time.Since(lastT).Seconds(), dead, live, vac, qdead, qvac)
		}
		last, lastT = a, time.Now()
	}
	appliedAt := time.Since(start)
	// Drained means recorded: results the recorders still hold are part of the drain.
	for {
		var left bool
		must(pool.QueryRow(ctx, fmt.Sprintf("SELECT EXISTS (SELECT 1 FROM %s WHERE sent_at IS NULL)", *q)).Scan(&left))
		if !left {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	fmt.Printf("total %.0f events/s over %s (applied after %s)\n", float64(*n)/time.Since(start).Seconds(), time.Since(start).Round(time.Millisecond), appliedAt.Round(time.Millisecond))
	after := walCounters(ctx, pool)
	busy := cpustat.Read().Sub(cpuBefore).BusyShare()
	fmt.Printf("CPU busy %.0f%% of the machine (%d cores): %.0f µs of CPU per event\n", 100*busy, runtime.NumCPU(),
		busy*float64(runtime.NumCPU())*time.Since(start).Seconds()*1e6/float64(*n))
	fmt.Printf("of which this process (the Go drainers): %.0f µs per event\n",
		(processCPU()-selfBefore).Seconds()*1e6/float64(*n))
	fmt.Printf("per event: %.0f WAL bytes, %.2f FPIs, %.2f records; %.3f commits (%.1f events per commit); %.1f events per claim, %.1f per apply_results call; %.1f%% of WAL time syncing, %.2f commits per sync\n",
		(after.bytes-before.bytes)/float64(*n), (after.fpi-before.fpi)/float64(*n), (after.records-before.records)/float64(*n),
		(after.commits-before.commits)/float64(*n), float64(*n)/(after.commits-before.commits),
		float64(*n)/(after.claims-before.claims), float64(*n)/(after.results-before.results),
		100*(after.syncMs-before.syncMs)/time.Since(start).Seconds()/1000, (after.commits-before.commits)/(after.syncs-before.syncs))
	cancel()
	wg.Wait()
	time.Sleep(time.Second) // the backends' table statistics reach the shared counters
	_, _ = pool.Exec(ctx, "SELECT pg_stat_clear_snapshot()")
	var upd, hot int64
	must(pool.QueryRow(ctx, `SELECT n_tup_upd, n_tup_hot_upd FROM pg_stat_user_tables WHERE relid = $1::regclass`, *q).Scan(&upd, &hot))
	fmt.Printf("queue table: %d row updates, %.0f%% HOT\n", upd, 100*float64(hot)/float64(max(upd, 1)))
}

// processCPU is the user and system CPU time this process has used.
func processCPU() time.Duration {
	var ru syscall.Rusage
	must(syscall.Getrusage(syscall.RUSAGE_SELF, &ru))
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

type counters struct{ bytes, fpi, records, commits, claims, results, syncMs, syncs float64 }

// walCounters reads the cluster's WAL statistics, the database's commits and the calls of the
// claim and record functions (track_functions must be pl for the last two).
func walCounters(ctx context.Context, pool *pgxpool.Pool) counters {
	var c counters
	_, _ = pool.Exec(ctx, "SELECT pg_stat_clear_snapshot()")
	must(pool.QueryRow(ctx, `SELECT w.wal_bytes::float8, w.wal_fpi::float8, w.wal_records::float8, w.wal_sync_time + w.wal_write_time, w.wal_sync::float8,
		(SELECT xact_commit::float8 FROM pg_stat_database WHERE datname = current_database()),
		COALESCE((SELECT sum(calls)::float8 FROM pg_stat_user_functions WHERE funcname IN ('claim_batch', 'claim_locked')), 0),
		COALESCE((SELECT sum(calls)::float8 FROM pg_stat_user_functions WHERE funcname IN ('apply_results', 'settle_locked')), 0)
		FROM pg_stat_wal w`).Scan(&c.bytes, &c.fpi, &c.records, &c.syncMs, &c.syncs, &c.commits, &c.claims, &c.results))
	return c
}

func must(err error) {
	if err != nil {
		panic(err)
	}
}

// probeURL is dsn with its database replaced by probe.
func probeURL(dsn string) string {
	base, query, _ := strings.Cut(dsn, "?")
	return base[:strings.LastIndex(base, "/")] + "/probe?" + query
}

// pad is the SQL expression of a payload's padding: 80 x's, or n hex digits that differ per row
// (g is the row's number), which compress about as well as real data.
func pad(n int) string {
	if n <= 0 {
		return "repeat('x', 80)"
	}
	return fmt.Sprintf("left((SELECT string_agg(md5(g::text || x::text), '') FROM generate_series(1, %d) x), %d)", n/32+1, n)
}
