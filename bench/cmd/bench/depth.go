package main

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"

	"github.com/pgdrain/pgdrain/bench/internal/cpustat"
	"github.com/pgdrain/pgdrain/drainer"
)

// Section 6 (depth, issue 12): partitioned drains measured the way users meet them, in one run.
//   6a  drains of 20k, 200k and 1M events (about 6 per key) in both claim modes with 1 and 4
//       replicas, each measurement on a fresh database and at least -depth-window long: a drain
//       shorter than that is repeated (a new queue each time, dropped after) until the drains
//       together last the window, and the rate is their events over their summed drain time;
//       6a runs run by run, every configuration and size in turn;
//   6b  the focus drain (200k, 4 replicas) after ten 200k drains of other queues in the same
//       database, each run right after the same drain on a fresh database; no manual VACUUM of
//       outbox's tables;
//   6c  the focus drain while another session of the same database holds an xid, each run right
//       after the same drain without it, and River and Graphile Worker in the same scenario;
//   6d  buffers of one claim sampled at 5%, 50% and 95% of the focus drains, against the static
//       claim on the same freshly filled queue before its drain started.
// -depth-scale multiplies every event count (for development; the default 1 is the size).

const (
	depthSmall = 20_000
	depthMid   = 200_000
	depthLarge = 1_000_000
	// depthPrior is how many drains precede the measured one in 6b.
	depthPrior = 10
)

// depthClaim is one drainer configuration of the section: ApplyConcurrency 32 (so 32-row claims
// applied in one wave), ApplyConcurrency 64 (a lease-mode replica then holds 64 rows, and its
// claims and results come in about 32 at a time instead of 16), or BatchSize 256 applied one row
// after another, as in section 2b.
type depthClaim struct {
	batch, concurrency int
}

func (c depthClaim) String() string {
	if c.concurrency > 1 {
		return fmt.Sprintf("BatchSize %d, ApplyConcurrency %d", c.batch, c.concurrency)
	}
	return fmt.Sprintf("BatchSize %d, ApplyConcurrency 1", c.batch)
}

func parseDepthClaims(s string) ([]depthClaim, error) {
	var out []depthClaim
	for _, f := range strings.Split(s, ",") {
		switch strings.TrimSpace(f) {
		case "32":
			out = append(out, depthClaim{batch: 32, concurrency: 32})
		case "64":
			out = append(out, depthClaim{batch: 32, concurrency: 64})
		case "256":
			out = append(out, depthClaim{batch: 256, concurrency: 1})
		case "":
		default:
			return nil, fmt.Errorf("-depth-batches: want 32, 64 and/or 256, got %q", f)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("-depth-batches is empty")
	}
	return out, nil
}

// depthCase is one measured drain configuration.
type depthCase struct {
	mode     drainer.ClaimMode
	replicas int
	claim    depthClaim
}

// config leaves the partition column to the registry (fillQueue registers resource_id).
func (c depthCase) config(q string) drainer.Config {
	return drainer.Config{Table: q, ClaimMode: c.mode, PollFallback: time.Second,
		BatchSize: c.claim.batch, ApplyConcurrency: c.claim.concurrency}
}

// claimSQL is one claim of c's mode, as a statement explainClaim can sample.
func (c depthCase) claimSQL(q string) string {
	if c.mode == drainer.ClaimLock {
		return fmt.Sprintf("SELECT * FROM outbox.claim_locked('%s', 32)", q)
	}
	return fmt.Sprintf("SELECT * FROM outbox.claim_batch('%s', 32)", q)
}

// sampleFractions are the points of a drain (share of its events applied) where 6d samples a claim.
var sampleFractions = []float64{0.05, 0.5, 0.95}

var sampleNames = []string{"start (5% applied)", "middle (50%)", "end (95%)"}

// depthResult is one measurement: one or more back-to-back drains of n events each.
type depthResult struct {
	rate    float64
	drains  int
	seconds float64 // summed drain time
	static  claimSample
	samples []claimSample // at sampleFractions of the first drain; nil when not sampled
	// cpuBusy is the share of the machine's CPU (both cores) busy during the drains (NaN: unknown):
	// near 1 means the drain was bound by CPU, and more replicas can only share it.
	cpuBusy float64
}

// depthBench carries the section's settings and its connections to the server.
type depthBench struct {
	o       options
	emit    func(string)
	scale   float64
	window  time.Duration
	claims  []depthClaim
	focus   []depthCase
	started time.Time
}

func (b *depthBench) size(n int) int { return max(int(math.Round(float64(n)*b.scale)), 60) }

func (b *depthBench) logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "depth %6s: %s\n", time.Since(b.started).Round(time.Second), fmt.Sprintf(format, args...))
}

// holdXid opens a session on dsn that takes an xid (BEGIN; SELECT txid_current()) and keeps it until
// the returned release is called.
func holdXid(ctx context.Context, dsn string) (func(), error) {
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return nil, err
	}
	if _, err := conn.Exec(ctx, "BEGIN"); err != nil {
		conn.Close(ctx)
		return nil, err
	}
	var xid int64
	if err := conn.QueryRow(ctx, "SELECT txid_current()").Scan(&xid); err != nil {
		conn.Close(ctx)
		return nil, err
	}
	return func() {
		_, _ = conn.Exec(context.Background(), "ROLLBACK")
		conn.Close(context.Background())
	}, nil
}

// drainFilled drains the already filled queue q (n events) with c and returns the time from the
// drainers' start to the moment no unsent row was left. With sampler set, it samples one claim on
// sampler's connection when the applied events cross each of sampleFractions.
func drainFilled(ctx context.Context, pool *pgxpool.Pool, c depthCase, q string, n int, sampler *pgxpool.Pool) (time.Duration, []claimSample, error) {
	var applied atomic.Int64
	decode := func(b []byte) (json.RawMessage, error) { return b, nil }
	apply := func(context.Context, string, json.RawMessage) error { applied.Add(1); return nil }
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	errs := make(chan error, c.replicas+1)
	var samples []claimSample
	sampleDone := make(chan struct{})
	start := time.Now()
	for range c.replicas {
		d, err := drainer.New(pool, c.config(q), decode, apply)
		if err != nil {
			return 0, nil, err
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := d.Run(runCtx); err != nil {
				errs <- err
			}
		}()
	}
	if sampler != nil {
		go func() {
			defer close(sampleDone)
			for _, f := range sampleFractions {
				for applied.Load() < int64(f*float64(n)) {
					if runCtx.Err() != nil {
						return
					}
					time.Sleep(time.Millisecond)
				}
				s, err := explainClaim(runCtx, sampler, c.claimSQL(q))
				if err != nil {
					if runCtx.Err() == nil {
						errs <- fmt.Errorf("sampling a claim: %w", err)
					}
					return
				}
				samples = append(samples, s)
			}
		}()
	} else {
		close(sampleDone)
	}
	// Wait on the applier's count first (free), then confirm on the table: polling the table all
	// along would walk the claim index's dead entries every few ms, most of all under a held xid.
	for applied.Load() < int64(n) && runCtx.Err() == nil && len(errs) == 0 {
		time.Sleep(time.Millisecond)
	}
	end, err := waitDrained(ctx, pool, q, 30*time.Minute)
	cancel()
	wg.Wait()
	<-sampleDone
	close(errs)
	if err != nil {
		return 0, nil, err
	}
	if e := <-errs; e != nil {
		return 0, nil, e
	}
	if sampler != nil && len(samples) < len(sampleFractions) {
		return 0, nil, fmt.Errorf("only %d of %d claim samples taken", len(samples), len(sampleFractions))
	}
	return end.Sub(start), samples, nil
}

// measure drains n-event queues named prefix_1, prefix_2, ... with c until the drains together
// last b.window (every queue but the last one is dropped after its drain when drop is set).
// The first queue's static claim and drain samples are taken when sample is set; hold, when set,
// is called after each fill and its release after the drain.
func (b *depthBench) measure(ctx context.Context, pool, sampler *pgxpool.Pool, c depthCase, prefix string, n int,
	sample, drop bool, hold func() (func(), error)) (depthResult, error) {
	var r depthResult
	var total time.Duration
	spent := cpustat.Times{OK: true}
	for total < b.window {
		r.drains++
		q := fmt.Sprintf("%s_%d", prefix, r.drains)
		if err := fillQueue(ctx, pool, q, n, true, 0); err != nil {
			return r, fmt.Errorf("filling %s: %w", q, err)
		}
		first := r.drains == 1 && sample
		if first {
			s, err := measure(ctx, sampler, c.claimSQL(q), 1)
			if err != nil {
				return r, fmt.Errorf("static claim on %s: %w", q, err)
			}
			r.static = s[0]
		}
		release := func() {}
		if hold != nil {
			var err error
			if release, err = hold(); err != nil {
				return r, fmt.Errorf("holding an xid: %w", err)
			}
		}
		var s *pgxpool.Pool
		if first {
			s = sampler
		}
		before := cpustat.Read()
		d, samples, err := drainFilled(ctx, pool, c, q, n, s)
		spent = spent.Plus(cpustat.Read().Sub(before))
		release()
		if err != nil {
			return r, fmt.Errorf("draining %s: %w", q, err)
		}
		if first {
			r.samples = samples
		}
		total += d
		if drop {
			if err := execAll(ctx, pool, fmt.Sprintf("SELECT outbox.drop_queue('%s', true)", q)); err != nil {
				return r, err
			}
		}
	}
	r.seconds = total.Seconds()
	r.rate = float64(r.drains*n) / total.Seconds()
	r.cpuBusy = spent.BusyShare()
	return r, nil
}

// freshDepth recreates database name and returns a pool for drainers and one for samples.
func (b *depthBench) freshDepth(ctx context.Context, name string) (*pgxpool.Pool, *pgxpool.Pool, error) {
	pool, err := freshDatabase(ctx, b.o.server, name, true, 24)
	if err != nil {
		return nil, nil, err
	}
	cfg, err := pgxpool.ParseConfig(withDatabase(b.o.server, name))
	if err != nil {
		pool.Close()
		return nil, nil, err
	}
	cfg.MaxConns = 1
	sampler, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		pool.Close()
		return nil, nil, err
	}
	return pool, sampler, nil
}

// fresh runs one measurement of c at n events on a fresh database.
func (b *depthBench) fresh(ctx context.Context, c depthCase, n int, sample bool, holding bool) (depthResult, error) {
	pool, sampler, err := b.freshDepth(ctx, "bench_depth")
	if err != nil {
		return depthResult{}, err
	}
	defer pool.Close()
	defer sampler.Close()
	var hold func() (func(), error)
	if holding {
		hold = func() (func(), error) { return holdXid(ctx, withDatabase(b.o.server, "bench_depth")) }
	}
	return b.measure(ctx, pool, sampler, c, "public.depth", n, sample, true, hold)
}

// series is the runs of one configuration.
type series []depthResult

func (s series) rates() summary {
	var v []float64
	for _, r := range s {
		v = append(v, r.rate)
	}
	return summarize(v)
}

// cpu is the median share of the machine's CPU busy during the runs, as a percentage ("–" unknown).
func (s series) cpu() string {
	var v []float64
	for _, r := range s {
		if math.IsNaN(r.cpuBusy) {
			return "–"
		}
		v = append(v, 100*r.cpuBusy)
	}
	return summarize(v).format("%.0f%%")
}

func (s series) sizing() string {
	var d, sec []float64
	for _, r := range s {
		d, sec = append(d, float64(r.drains)), append(sec, r.seconds)
	}
	ds, ss := summarize(d), summarize(sec)
	if ds.min == ds.max {
		return fmt.Sprintf("%.0f × %s", ds.median, ss.format("%.1f s"))
	}
	return fmt.Sprintf("%s × %s", ds.format("%.0f"), ss.format("%.1f s"))
}

// sampleAt summarizes the buffers and milliseconds of sample i (-1 = the static claim).
func (s series) sampleAt(i int) (buffers, ms summary, rows []int) {
	var cs []claimSample
	for _, r := range s {
		if i < 0 {
			cs = append(cs, r.static)
		} else if i < len(r.samples) {
			cs = append(cs, r.samples[i])
		}
	}
	for _, c := range cs {
		rows = append(rows, c.rows)
	}
	sort.Ints(rows)
	b, m := split(cs)
	return b, m, rows
}

func ratio(a, b float64) string {
	if b == 0 {
		return "–"
	}
	return fmt.Sprintf("%.2f", a/b)
}

func verdict(v, target float64, atLeast bool) string {
	if (atLeast && v >= target) || (!atLeast && v <= target) {
		return "met"
	}
	return "**not met**"
}

func thousands(n int) string {
	s := fmt.Sprint(n)
	var out []byte
	for i := range len(s) {
		if i > 0 && (len(s)-i)%3 == 0 {
			out = append(out, ',')
		}
		out = append(out, s[i])
	}
	return string(out)
}

func benchDepth(ctx context.Context, o options, emit func(string)) error {
	claims, err := parseDepthClaims(o.depthBatches)
	if err != nil {
		return err
	}
	b := &depthBench{o: o, emit: emit, scale: o.depthScale, window: o.depthWindow, claims: claims, started: time.Now()}
	for _, f := range strings.Split(o.depthFocus, ",") {
		switch strings.TrimSpace(f) {
		case "lease":
			b.focus = append(b.focus, depthCase{mode: drainer.ClaimLease, replicas: 4, claim: claims[0]})
		case "lock":
			b.focus = append(b.focus, depthCase{mode: drainer.ClaimLock, replicas: 4, claim: claims[0]})
		default:
			return fmt.Errorf("-depth-focus: want lease and/or lock, got %q", f)
		}
	}
	sizes := []int{b.size(depthSmall), b.size(depthMid), b.size(depthLarge)}
	mid := sizes[1]

	largeNote := ""
	if o.depthLargeRuns > 0 && o.depthLargeRuns != o.runs {
		largeNote = fmt.Sprintf(" (%d for the %s-event drains)", o.depthLargeRuns, thousands(sizes[2]))
	}
	emit("## 6. Partitioned drains in motion: depth, replicas, churn, a held xid (issue 12)\n\n")
	load := loadAverage()
	defer func() {
		emit(fmt.Sprintf("Load average (1, 5, 15 min) of the machine at the start of section 6: %s; at its end: %s.\n\n", load, loadAverage()))
	}()
	emit(fmt.Sprintf("Go drainer, no-op applier, partitioned queue of about 6 events per key (as section 2), fresh database per measurement; "+
		"events/s, median (min–max) of %d runs%s. A measurement lasts at least %s: a drain shorter than that is repeated on a new queue "+
		"(the previous one dropped) until the drains together last %s, and the rate is their events over their summed drain time "+
		"(the \"sizing\" column: drains × summed seconds). Event-count scale: %g.\n\n", o.runs, largeNote, b.window, b.window, b.scale))

	// 6a: depth and replicas.
	type key struct {
		c depthCase
		n int
	}
	results := map[key]series{}
	for _, cl := range claims {
		emit(fmt.Sprintf("### 6a. Depth and replicas (%s)\n\n", cl))
		small := thousands(sizes[0])
		emit(fmt.Sprintf("| mode | replicas | events per drain | sizing | events/s | ÷ %s-event rate | CPU busy (all cores) |\n|---|---:|---:|---|---:|---:|---:|\n", small))
		// Run by run, every configuration and size in turn: load that other work puts on the
		// machine then moves all of them alike instead of one size or one configuration.
		var cases []depthCase
		for _, mode := range []drainer.ClaimMode{drainer.ClaimLease, drainer.ClaimLock} {
			for _, replicas := range []int{1, 4} {
				cases = append(cases, depthCase{mode: mode, replicas: replicas, claim: cl})
			}
		}
		for run := range o.runs {
			for _, c := range cases {
				for _, n := range sizes {
					if n == sizes[2] && o.depthLargeRuns > 0 && run >= o.depthLargeRuns {
						continue
					}
					isFocus := n == mid && slices.Contains(b.focus, c)
					r, err := b.fresh(ctx, c, n, isFocus, false)
					if err != nil {
						return fmt.Errorf("%s %d replicas %d events: %w", c.mode, c.replicas, n, err)
					}
					b.logf("6a %s, %s, %d replicas, %d events, run %d: %.0f events/s (%d drains, %.1f s)", cl, c.mode, c.replicas, n, run+1, r.rate, r.drains, r.seconds)
					results[key{c, n}] = append(results[key{c, n}], r)
				}
			}
		}
		for _, c := range cases {
			for _, n := range sizes {
				s := results[key{c, n}]
				rel := ratio(s.rates().median, results[key{c, sizes[0]}].rates().median)
				emit(fmt.Sprintf("| %s | %d | %s | %s | %s | %s | %s |\n", c.mode, c.replicas, thousands(n), s.sizing(), s.rates().format("%.0f"), rel, s.cpu()))
			}
		}
		emit(fmt.Sprintf("\nTargets (medians): a deeper drain at ≥ 0.8 of the %s-event rate; 4 replicas at ≥ 1.3 of 1 replica. "+
			"CPU busy is the share of the whole machine's CPU time (every core, the drainers and PostgreSQL alike) spent working "+
			"during the drains: where one replica already keeps it near 100%%, more replicas can only share the same CPU.\n\n", small))
		emit(fmt.Sprintf("| mode | events per drain | ÷ %[1]s, 1 replica | ÷ %[1]s, 4 replicas | 4 replicas ÷ 1 replica | depth target | replica target |\n|---|---:|---:|---:|---:|---|---|\n", small))
		for _, mode := range []drainer.ClaimMode{drainer.ClaimLease, drainer.ClaimLock} {
			for _, n := range sizes {
				one := depthCase{mode: mode, replicas: 1, claim: cl}
				four := depthCase{mode: mode, replicas: 4, claim: cl}
				d1 := results[key{one, n}].rates().median / results[key{one, sizes[0]}].rates().median
				d4 := results[key{four, n}].rates().median / results[key{four, sizes[0]}].rates().median
				rr := results[key{four, n}].rates().median / results[key{one, n}].rates().median
				dv := "–"
				if n != sizes[0] {
					dv = verdict(min(d1, d4), 0.8, true)
				}
				emit(fmt.Sprintf("| %s | %s | %.2f | %.2f | %.2f | %s | %s |\n", mode, thousands(n), d1, d4, rr, dv, verdict(rr, 1.3, true)))
			}
		}
		emit("\n")
	}
	if o.depth6aOnly {
		return nil
	}

	// 6b: after ten drains in the same database.
	emit(fmt.Sprintf("### 6b. A %s-event drain after %d others in the same database\n\n", thousands(mid), depthPrior))
	emit(fmt.Sprintf("One database: %d drains of %s events on %d other queues (modes alternating, left in place with their sent rows), "+
		"then %d measured drains per mode on new queues, modes alternating (so each follows %d to %d drains), each right after the same drain "+
		"on a fresh database (%s, 4 replicas). No VACUUM of outbox's tables; autovacuum on as usual; each new queue table gets the VACUUM ANALYZE of its fill.\n\n",
		depthPrior, thousands(mid), depthPrior, o.runs, depthPrior, depthPrior+len(b.focus)*o.runs-1, claims[0]))
	churned := map[depthCase]series{}
	pool, sampler, err := b.freshDepth(ctx, "bench_depth_churn")
	if err != nil {
		return err
	}
	defer pool.Close()
	defer sampler.Close()
	for i := range depthPrior {
		c := b.focus[i%len(b.focus)]
		q := fmt.Sprintf("public.prior_%d", i+1)
		if err := fillQueue(ctx, pool, q, mid, true, 0); err != nil {
			return fmt.Errorf("6b prior drain %d: %w", i+1, err)
		}
		d, _, err := drainFilled(ctx, pool, c, q, mid, nil)
		if err != nil {
			return fmt.Errorf("6b prior drain %d: %w", i+1, err)
		}
		b.logf("6b prior drain %d (%s): %.0f events/s", i+1, c.mode, float64(mid)/d.Seconds())
	}
	done := depthPrior
	freshB := map[depthCase]series{}
	for run := range o.runs {
		for _, c := range b.focus {
			f, err := b.fresh(ctx, c, mid, false, false)
			if err != nil {
				return fmt.Errorf("6b fresh drain %d: %w", run+1, err)
			}
			b.logf("6b %s fresh database, run %d: %.0f events/s", c.mode, run+1, f.rate)
			freshB[c] = append(freshB[c], f)
			r, err := b.measure(ctx, pool, sampler, c, fmt.Sprintf("public.after_%s_%d", c.mode, run+1), mid, true, false, nil)
			if err != nil {
				return fmt.Errorf("6b measured drain %d: %w", run+1, err)
			}
			b.logf("6b %s after %d drains, run %d: %.0f events/s", c.mode, done, run+1, r.rate)
			done += r.drains
			churned[c] = append(churned[c], r)
		}
	}
	var dead, live int64
	_ = pool.QueryRow(ctx, "SELECT n_dead_tup, n_live_tup FROM pg_stat_user_tables WHERE relid = 'outbox.partition_heads'::regclass").Scan(&dead, &live)
	emit("| mode | fresh database, events/s | after ten drains, events/s | sizing after ten | ratio | target ≥ 0.9 |\n|---|---:|---:|---|---:|---|\n")
	for _, c := range b.focus {
		s := churned[c]
		rr := s.rates().median / freshB[c].rates().median
		emit(fmt.Sprintf("| %s | %s | %s | %s | %.2f | %s |\n", c.mode, freshB[c].rates().format("%.0f"), s.rates().format("%.0f"), s.sizing(), rr, verdict(rr, 0.9, true)))
	}
	emit(fmt.Sprintf("\nAt the end, outbox.partition_heads had %s dead and %s live tuples (pg_stat_user_tables).\n\n", thousands(int(dead)), thousands(int(live))))

	// 6c: a held xid.
	emit(fmt.Sprintf("### 6c. A %s-event drain while another session holds an xid\n\n", thousands(mid)))
	emit("An idle session of the same database ran `BEGIN; SELECT txid_current();` before the drain started and rolled back after it ended " +
		"(for River and Graphile Worker: before their fill, which their run function does just before draining). " +
		"Each run measures the drain without the held xid and then with it, on fresh databases, so both see the same load.\n\n")
	emit("| system | settings | without, events/s | with a held xid, events/s | ratio | target ≥ 0.5 |\n|---|---|---:|---:|---:|---|\n")
	held := map[depthCase]series{}
	for _, c := range b.focus {
		var s, w series
		for run := range o.runs {
			f, err := b.fresh(ctx, c, mid, false, false)
			if err != nil {
				return fmt.Errorf("6c %s: %w", c.mode, err)
			}
			b.logf("6c %s without, run %d: %.0f events/s (%d drains, %.1f s)", c.mode, run+1, f.rate, f.drains, f.seconds)
			w = append(w, f)
			r, err := b.fresh(ctx, c, mid, true, true)
			if err != nil {
				return fmt.Errorf("6c %s: %w", c.mode, err)
			}
			b.logf("6c %s held xid, run %d: %.0f events/s (%d drains, %.1f s)", c.mode, run+1, r.rate, r.drains, r.seconds)
			s = append(s, r)
		}
		held[c] = s
		rr := s.rates().median / w.rates().median
		emit(fmt.Sprintf("| pgdrain, %s mode | %s, 4 replicas; sizing without %s, with %s | %s | %s | %.2f | %s |\n",
			c.mode, c.claim, w.sizing(), s.sizing(), w.rates().format("%.0f"), s.rates().format("%.0f"), rr, verdict(rr, 0.5, true)))
	}
	if err := b.peersHeld(ctx, mid); err != nil {
		return err
	}
	emit("\n")

	// 6d: claim samples.
	emit("### 6d. Buffers of one claim sampled during a drain\n\n")
	emit(fmt.Sprintf("One claim of the drain's mode (`claim_batch(queue, 32)` / `claim_locked(queue, 32)`) as EXPLAIN (ANALYZE, BUFFERS) on a separate connection "+
		"in a transaction rolled back, when the drainers had applied 5%%, 50%% and 95%% of the first %s-event drain of each 6a, 6b and 6c measurement above "+
		"(%s, 4 replicas); the static claim is the same statement on the same freshly filled and analyzed queue just before the drainers started "+
		"(after a warm-up, as section 1 measures). Shared buffers (hit + read) and ms, median (min–max) of %d runs; rows = rows claimed per sample (each run).\n\n",
		thousands(mid), claims[0], o.runs))
	emit("| mode | drain | when | buffers | ms | rows | ÷ static buffers | target ≤ 3 |\n|---|---|---|---:|---:|---|---:|---|\n")
	for _, c := range b.focus {
		fresh := results[key{c, mid}]
		static, sms, srows := fresh.sampleAt(-1)
		emit(fmt.Sprintf("| %s | fresh database | static, before the drain | %s | %s | %s | 1.00 | – |\n", c.mode, static.format("%.0f"), sms.format("%.2f"), intsCell(srows)))
		for _, d := range []struct {
			name string
			s    series
		}{{"fresh database", fresh}, {fmt.Sprintf("after %d drains", depthPrior), churned[c]}, {"held xid", held[c]}} {
			for i, when := range sampleNames {
				bs, ms, rows := d.s.sampleAt(i)
				rr := bs.median / static.median
				emit(fmt.Sprintf("| %s | %s | %s | %s | %s | %s | %.2f | %s |\n", c.mode, d.name, when, bs.format("%.0f"), ms.format("%.2f"), intsCell(rows), rr, verdict(rr, 3, false)))
			}
		}
	}
	emit("\n")
	return nil
}

// loadAverage is /proc/loadavg's first three fields ("?" where there is none): other work on the
// machine moves these figures.
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], ", ")
}

func intsCell(v []int) string {
	var s []string
	for _, x := range v {
		s = append(s, fmt.Sprint(x))
	}
	return strings.Join(s, ", ")
}

// peersHeld runs River and Graphile Worker at n jobs without and with a held xid, o.runs each, and
// emits their rows of 6c. A peer that cannot run here gets a row saying why.
func (b *depthBench) peersHeld(ctx context.Context, n int) error {
	o := b.o
	riverPool, err := freshDatabase(ctx, o.server, "bench_depth_river", false, 40)
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
	riverDSN := withDatabase(o.server, "bench_depth_river")
	var rates [2][]float64
	for run := range o.runs {
		for h := range 2 {
			release := func() {}
			if h == 1 {
				if release, err = holdXid(ctx, riverDSN); err != nil {
					return err
				}
			}
			r, _, err := riverOnce(ctx, riverPool, n)
			release()
			if err != nil {
				return fmt.Errorf("6c river: %w", err)
			}
			b.logf("6c river, held xid %v, run %d: %.0f jobs/s", h == 1, run+1, r)
			rates[h] = append(rates[h], r)
		}
	}
	rr := summarize(rates[1]).median / summarize(rates[0]).median
	b.emit(fmt.Sprintf("| River v0.51.2, no-op worker | FetchCooldown 2ms, FetchPollInterval 20ms, MaxWorkers %d, pool 40, %s jobs pre-inserted | %s | %s | %.2f | %s |\n",
		riverWorkers, thousands(n), summarize(rates[0]).format("%.0f"), summarize(rates[1]).format("%.0f"), rr, verdict(rr, 0.5, true)))

	const label = "Graphile Worker"
	dir, err := graphileSetup(ctx)
	if err != nil {
		b.emit(fmt.Sprintf("| %s | skipped: %s | – | – | – | – |\n", label, mdCell(err.Error())))
		return nil
	}
	pool, err := freshDatabase(ctx, o.server, "bench_depth_graphile", false, 1)
	if err != nil {
		return err
	}
	pool.Close()
	dsn := withDatabase(o.server, "bench_depth_graphile")
	rates = [2][]float64{}
	var last graphileResult
	for run := range o.runs {
		for h := range 2 {
			release := func() {}
			if h == 1 {
				if release, err = holdXid(ctx, dsn); err != nil {
					return err
				}
			}
			r, res, err := graphileOnce(ctx, dir, dsn, 1, n)
			release()
			if err != nil {
				b.emit(fmt.Sprintf("| %s | failed: %s | – | – | – | – |\n", label, mdCell(err.Error())))
				return nil
			}
			b.logf("6c graphile, held xid %v, run %d: %.0f jobs/s", h == 1, run+1, r)
			rates[h], last = append(rates[h], r), res
		}
	}
	rr = summarize(rates[1]).median / summarize(rates[0]).median
	b.emit(fmt.Sprintf("| %s %s, no-op task | 1 process: %s, %s jobs pre-inserted | %s | %s | %.2f | %s |\n",
		label, last.Version, last.Settings, thousands(n), summarize(rates[0]).format("%.0f"), summarize(rates[1]).format("%.0f"), rr, verdict(rr, 0.5, true)))
	return nil
}
