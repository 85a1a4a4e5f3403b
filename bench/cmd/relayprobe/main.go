// Command relayprobe drains one pre-filled partitioned queue (about 6 events per key, lease mode,
// ApplyConcurrency 32) with N replicas of the relay (a no-op sink, BatchSize 32) or of the Go
// drainer (a no-op Applier) and prints what one configuration costs: events per second over the
// window after a second's warm-up, the probe's own CPU per event (the Go side), Deliver calls and
// events per call, and the claims and result flushes the server saw (pg_stat_user_functions:
// run the server with track_functions = pl). For a question about the relay's pacing, alternate
// runs of the two kinds on one server:
//
//	go run ./cmd/relayprobe -kind relay -replicas 4
//	go run ./cmd/relayprobe -kind drainer -replicas 4
//
// PROF=file writes a CPU profile of the window.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"runtime/pprof"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgdrain/pgdrain/drainer"
	"github.com/pgdrain/pgdrain/relay"
)

type countSink struct{ calls, events *atomic.Int64 }

func (s countSink) Deliver(_ context.Context, ev []relay.Event) []relay.Result {
	s.calls.Add(1)
	s.events.Add(int64(len(ev)))
	return make([]relay.Result, len(ev))
}
func (countSink) Close() error { return nil }

func main() {
	n := flag.Int("n", 100000, "events in the queue (more than a window drains)")
	reps := flag.Int("replicas", 4, "replicas, one pool")
	kind := flag.String("kind", "relay", "relay (no-op sink) or drainer (no-op Applier)")
	linger := flag.Duration("linger", 0, "the relay's BatchLinger (0: its default)")
	window := flag.Duration("window", 5*time.Second, "measurement window")
	flag.Parse()
	ctx := context.Background()
	pc, err := pgxpool.ParseConfig(os.Getenv("DATABASE_URL"))
	if err != nil {
		panic(err)
	}
	pc.MaxConns = 40 // as the bench's relay section
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		panic(err)
	}
	q := fmt.Sprintf("public.rp_%d", time.Now().UnixNano()%100000)
	must(pool.Exec(ctx, fmt.Sprintf("SELECT outbox.create_queue('%s', 'resource_id')", q)))
	must(pool.Exec(ctx, fmt.Sprintf(`INSERT INTO %s (event_type, resource_id, payload) SELECT 'evt', 'key-' || (g %% %d), jsonb_build_object('n', g, 'pad', repeat('x', 80)) FROM generate_series(1, %d) g`, q, *n/6, *n)))
	must(pool.Exec(ctx, "VACUUM ANALYZE "+q))
	stats := func() map[string][2]float64 {
		m := map[string][2]float64{}
		rows, err := pool.Query(ctx, `SELECT funcname, calls, total_time FROM pg_stat_user_functions WHERE funcname IN ('claim_batch','apply_results','claim_turn','next_due')`)
		if err != nil {
			panic(err)
		}
		for rows.Next() {
			var f string
			var c int64
			var t float64
			_ = rows.Scan(&f, &c, &t)
			m[f] = [2]float64{float64(c), t}
		}
		return m
	}
	before := stats()
	var calls, events atomic.Int64
	cfg := drainer.Config{ApplyConcurrency: 32, ApplyTimeout: 5 * time.Second, PollFallback: time.Second}
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, *reps)
	for range *reps {
		if *kind == "drainer" {
			c := cfg
			c.Table = q
			d, err := drainer.New(pool, c, func(b []byte) (json.RawMessage, error) { return b, nil },
				func(context.Context, string, json.RawMessage) error { calls.Add(1); events.Add(1); return nil })
			if err != nil {
				panic(err)
			}
			go func() { done <- d.Run(runCtx) }()
		} else {
			r, err := relay.New(pool, []relay.Route{{Queue: q, Sink: countSink{&calls, &events}, SinkKind: "noop", BatchSize: 32, BatchLinger: *linger, Drainer: cfg}})
			if err != nil {
				panic(err)
			}
			go func() { done <- r.Run(runCtx) }()
		}
	}
	sent := func() int64 {
		var c int64
		if err := pool.QueryRow(ctx, fmt.Sprintf("SELECT count(*) FROM %s WHERE sent_at IS NOT NULL", q)).Scan(&c); err != nil {
			panic(err)
		}
		return c
	}
	time.Sleep(time.Second)
	cpu := func() time.Duration {
		var ru syscall.Rusage
		_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
		return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	if pf := os.Getenv("PROF"); pf != "" {
		f, _ := os.Create(pf)
		_ = pprof.StartCPUProfile(f)
		defer pprof.StopCPUProfile()
	}
	s1, t1, c1, e1, u1 := sent(), time.Now(), calls.Load(), events.Load(), cpu()
	time.Sleep(*window)
	s2, t2, c2, e2, u2 := sent(), time.Now(), calls.Load(), events.Load(), cpu()
	if os.Getenv("PROF") != "" {
		pprof.StopCPUProfile()
	}
	fmt.Printf("go cpu %.1f µs/event; ", float64((u2-u1).Microseconds())/float64(s2-s1))
	cancel()
	for range *reps {
		<-done
	}
	rate := float64(s2-s1) / t2.Sub(t1).Seconds()
	var st string
	for f, a := range stats() {
		b := before[f]
		st += fmt.Sprintf(" %s=%.0f(%.3fms)", f, a[0]-b[0], (a[1]-b[1])/max(a[0]-b[0], 1))
	}
	fmt.Printf("%s x%d linger=%s: %.0f ev/s; deliver calls %d, ev/call %.1f;%s\n", *kind, *reps, *linger, rate, c2-c1, float64(e2-e1)/float64(max(c2-c1, 1)), st)
	must(pool.Exec(ctx, fmt.Sprintf("SELECT outbox.drop_queue('%s', true)", q)))
	os.Exit(0)
}

func must(_ any, err error) {
	if err != nil {
		panic(err)
	}
}
