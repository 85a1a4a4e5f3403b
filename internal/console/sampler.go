package console

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgdrain/pgdrain/internal/console/timetext"
)

// sample is one reading of a queue: its gauges, the table's cumulative insert counter and how
// many of the rows stats counts as ready wait behind a wedged head (blocked).
type sample struct {
	at       time.Time
	stats    Stats
	inserted int64
	blocked  int64
}

// series is what the sampler knows about one queue.
type series struct {
	reg     queueReg
	samples []sample // oldest first, at most History old
	err     error    // the last sampling error, cleared by the next success
	// failingSince is when the reads that keep failing (err) began to fail; zero after a success.
	failingSince time.Time
	// wedged are the partitions wedged for longer than wedgedAfter as of the last reading (read
	// only when the oldest pending row is that old: a queue without one has none), and wedgedErr
	// why they could not be read.
	wedged    []Wedged
	wedgedErr error
	// rebuild says that claims are rebuilding the partition heads as of the last reading (nil: they
	// are not, or it can not be known), and rebuildErr why that could not be read.
	rebuild    *HeadsRebuild
	rebuildErr error
	// goneSince is when the sampler first saw the queue's table gone (reg.Gone); its figures, which
	// described a table that no longer exists, are dropped then.
	goneSince time.Time
}

// reading is what one pass reads of one queue.
type reading struct {
	sample     sample
	err        error
	wedged     []Wedged
	wedgedErr  error
	rebuild    *HeadsRebuild
	rebuildErr error
}

// sampler reads every queue's gauges once per Refresh for all viewers: the pages never call
// outbox.stats themselves, so their number does not multiply its cost.
//
// Every read ends: a pass (the registry, then each queue) has a deadline (timeout), so a table held
// by a lock or a connection lost without a word costs that queue its figures for a while, never the
// sampler. The queues are read side by side (at most parallel at once, so that the pages keep
// connections of the pool) and each reading is kept as it arrives; a pass does not wait for a queue
// whose read from an earlier pass still runs. A queue's figures carry the time they were read, and
// a failing read says since when (failingSince), so the pages can tell live figures from old ones.
type sampler struct {
	db          *pgxpool.Pool
	history     time.Duration
	wedgedAfter time.Duration
	interval    time.Duration // Refresh
	timeout     time.Duration // the deadline of one pass
	slots       chan struct{} // one per queue read running

	mu       sync.RWMutex
	queues   []string // registry order
	series   map[string]*series
	inFlight map[string]bool // queues whose read still runs
	listErr  error
	// at is when the registry was last read; listFailingSince when its reads that keep failing
	// began to fail (zero after a success).
	at               time.Time
	listFailingSince time.Time
	// passAt is when the last pass began.
	passAt time.Time
}

// sampleTimeout is the shortest deadline of a sampler pass: as long as a page's reads may take
// (queryTimeout), or Refresh when that is longer.
const sampleTimeout = queryTimeout

func newSampler(db *pgxpool.Pool, refresh, history, wedgedAfter time.Duration) *sampler {
	parallel := 1
	if db != nil {
		parallel = max(1, int(db.Config().MaxConns)/2)
	}
	return &sampler{db: db, history: history, wedgedAfter: wedgedAfter, interval: refresh,
		timeout: max(refresh, sampleTimeout), slots: make(chan struct{}, parallel),
		series: map[string]*series{}, inFlight: map[string]bool{}}
}

// staleAfter is how old a queue's figures may be before the pages say they are not live: a read
// may take up to the pass's deadline and starts at most a Refresh after the last one ended.
func (s *sampler) staleAfter() time.Duration { return 2*s.interval + s.timeout }

// readFailed says why a read failed, in a sentence: a read that ran out of time names the
// deadline and the likely causes rather than only "context deadline exceeded".
func (s *sampler) readFailed(err error) error {
	if errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("no answer within %s (a lock held on the table, or a lost connection?): %w", human(s.timeout), err)
	}
	return err
}

// read reads one queue: outbox.stats and the insert counter; on a partitioned queue whether claims
// rebuild its heads (outbox.heads_rebuild: meanwhile keys wait that nothing else shows), and when its
// oldest pending row is older than wedgedAfter its wedged partitions (outbox.wedged_partitions, at
// most listLimit), whose successors stats counts as ready although no claim can take them.
func (s *sampler) read(ctx context.Context, q queueReg) reading {
	if q.Gone {
		return reading{sample: sample{at: time.Now()}} // nothing to read (keep notes it gone)
	}
	start := time.Now()
	st, ins, err := readStats(ctx, s.db, q)
	r := reading{sample: sample{at: time.Now(), stats: st, inserted: ins}, err: err}
	if err != nil {
		r.sample.at, r.err = start, s.readFailed(err) // a failure dates from when the read began
		return r
	}
	if q.PartitionColumn == nil {
		return r
	}
	if r.rebuild, r.rebuildErr = readHeadsRebuild(ctx, s.db, q.Name); r.rebuildErr != nil {
		r.rebuildErr = s.readFailed(r.rebuildErr)
	}
	if st.OldestPendingAge == nil || *st.OldestPendingAge < s.wedgedAfter {
		return r
	}
	r.wedged, r.wedgedErr = readWedged(ctx, s.db, q.Name, s.wedgedAfter)
	if r.wedgedErr != nil {
		r.wedgedErr = s.readFailed(r.wedgedErr)
	}
	for _, w := range r.wedged {
		r.sample.blocked += max(0, w.Pending-1)
	}
	r.sample.blocked = min(r.sample.blocked, st.Ready)
	return r
}

// keep records a reading in sr, dropping samples older than History. A failed reading keeps the
// figures read before and notes since when reading fails.
func (s *sampler) keep(sr *series, r reading) {
	if sr.reg.Gone {
		if sr.goneSince.IsZero() {
			sr.goneSince = r.sample.at
		}
		sr.samples, sr.wedged, sr.wedgedErr, sr.err, sr.failingSince = nil, nil, nil, nil, time.Time{}
		sr.rebuild, sr.rebuildErr = nil, nil
		return
	}
	sr.err = r.err
	if r.err != nil {
		if sr.failingSince.IsZero() {
			sr.failingSince = r.sample.at
		}
		return
	}
	sr.failingSince = time.Time{}
	sr.wedged, sr.wedgedErr = r.wedged, r.wedgedErr
	sr.rebuild, sr.rebuildErr = r.rebuild, r.rebuildErr
	sr.samples = append(sr.samples, r.sample)
	cut := 0
	for cut < len(sr.samples)-1 && sr.samples[cut].at.Before(r.sample.at.Add(-s.history)) {
		cut++
	}
	sr.samples = append([]sample(nil), sr.samples[cut:]...)
}

// refresh reads one queue again now, so that the page an action redirects to shows what it
// changed (within the pass's deadline, like any read of the sampler).
func (s *sampler) refresh(ctx context.Context, name string) {
	s.mu.RLock()
	sr, ok := s.series[name]
	var reg queueReg
	if ok {
		reg = sr.reg
	}
	s.mu.RUnlock()
	if !ok {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	s.store(reg, s.read(ctx, reg))
}

// store keeps a reading of q, unless q was dropped (or its name given to another table) meanwhile.
func (s *sampler) store(q queueReg, r reading) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if cur, ok := s.series[q.Name]; ok && cur.reg.TableOID == q.TableOID {
		s.keep(cur, r)
	}
}

// sampleOnce is one pass that waits for its reads: the registry, then every queue's gauges, all
// within the pass's deadline.
func (s *sampler) sampleOnce(ctx context.Context) { s.pass(ctx).Wait() }

// pass reads the registry, then starts a read of every queue whose read from an earlier pass has
// ended, and returns what to wait on for them. A queue whose gauges fail keeps its history and
// shows the error; a failing registry read keeps everything (and its time) and shows that error.
func (s *sampler) pass(ctx context.Context) *sync.WaitGroup {
	var wg sync.WaitGroup
	start := time.Now()
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	s.mu.Lock()
	s.passAt = start
	s.mu.Unlock()
	regs, err := listQueues(ctx, s.db)
	if err != nil {
		cancel()
		s.mu.Lock()
		s.listErr = s.readFailed(err)
		if s.listFailingSince.IsZero() {
			s.listFailingSince = start
		}
		s.mu.Unlock()
		return &wg
	}
	s.mu.Lock()
	s.listErr, s.listFailingSince, s.at = nil, time.Time{}, time.Now()
	next := make(map[string]*series, len(regs))
	s.queues = s.queues[:0]
	var todo []queueReg
	for _, q := range regs {
		sr := s.series[q.Name]
		if sr == nil || sr.reg.TableOID != q.TableOID {
			sr = &series{} // a new queue, or the same name on another table: start afresh
		}
		sr.reg = q
		if q.Gone {
			s.keep(sr, reading{sample: sample{at: start}}) // its figures go now, not when its read ends
		}
		next[q.Name] = sr
		s.queues = append(s.queues, q.Name)
		if !s.inFlight[q.Name] {
			s.inFlight[q.Name] = true
			todo = append(todo, q)
		}
	}
	s.series = next
	s.mu.Unlock()
	for _, q := range todo {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var r reading
			select {
			case s.slots <- struct{}{}:
				r = s.read(ctx, q)
				<-s.slots
			case <-ctx.Done():
				r = reading{sample: sample{at: start}, err: s.readFailed(fmt.Errorf("waiting for the other queues' reads: %w", ctx.Err()))}
			}
			s.store(q, r)
			s.mu.Lock()
			delete(s.inFlight, q.Name)
			s.mu.Unlock()
		}()
	}
	go func() { wg.Wait(); cancel() }()
	return &wg
}

// run starts a pass every interval until ctx ends. It waits for a pass's registry read but not for
// its queues: a slow queue holds up neither the others nor the next pass.
func (s *sampler) run(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			s.pass(ctx)
		}
	}
}

// Rate is a throughput over a window, per minute; OK is false until two samples span it.
type Rate struct {
	Delivered, Enqueued float64
	Window              time.Duration
	OK                  bool
}

// rateOver derives throughput from the first and last samples within window. Rows enter the
// unsent set by INSERT and leave it only by being sent (or deleted by hand): requeue and
// poisoning move rows between pending and poisoned, so delivered = inserted - growth of
// (pending + poisoned). An estimate: the insert counter also counts rows of rolled-back inserts,
// lags up to a second (the statistics flush) and restarts at a stats reset (then: no figure).
func rateOver(samples []sample, window time.Duration) Rate {
	r := Rate{Window: window}
	if len(samples) < 2 {
		return r
	}
	last := samples[len(samples)-1]
	first := -1
	for i, smp := range samples[:len(samples)-1] {
		if !smp.at.Before(last.at.Add(-window - window/10)) {
			first = i
			break
		}
	}
	if first < 0 {
		return r
	}
	a := samples[first]
	span := last.at.Sub(a.at)
	ins := last.inserted - a.inserted
	if span <= 0 || ins < 0 {
		return r
	}
	growth := (last.stats.Pending + last.stats.Poisoned) - (a.stats.Pending + a.stats.Poisoned)
	perMin := float64(time.Minute) / float64(span)
	r.Window = span.Round(time.Second)
	r.Enqueued = float64(ins) * perMin
	r.Delivered = max(0, float64(ins-growth)*perMin)
	r.OK = true
	return r
}

// Points of a sparkline: the overview draws one per queue it lists (150 px wide), the queue page
// one chart. A history of 15 minutes at a 1s --refresh has 900 samples; the overview fetched every
// refresh by every tab carried them all, for every queue.
const (
	overviewSparkPoints = 60
	queueSparkPoints    = 150
)

// sparkline renders delivered-per-minute as SVG polyline points in a 300x40 box, newest on the
// right, so that the page can draw it without JavaScript: at most maxPoints points, in whole units.
// With more intervals between samples than that, each point is the throughput over a span of
// successive samples (rateOver of its first and last: what was delivered in it, not one interval's
// figure), so a long history at a short --refresh costs the page a fixed number of points.
func sparkline(samples []sample, maxPoints int) (points string, peak float64) {
	if len(samples) < 2 || maxPoints < 2 {
		return "", 0
	}
	spans := min(len(samples)-1, maxPoints)
	rates := make([]float64, 0, spans)
	for k := range spans {
		a, b := k*(len(samples)-1)/spans, (k+1)*(len(samples)-1)/spans
		r := rateOver(samples[a:b+1], samples[b].at.Sub(samples[a].at))
		rates = append(rates, r.Delivered)
		peak = max(peak, r.Delivered)
	}
	var b strings.Builder
	for i, v := range rates {
		x := 300.0
		if len(rates) > 1 {
			x = 300 * float64(i) / float64(len(rates)-1)
		}
		y := 38.0
		if peak > 0 {
			y = 38 - 36*v/peak
		}
		if i > 0 {
			b.WriteByte(' ')
		}
		fmt.Fprintf(&b, "%.0f,%.0f", x, y)
	}
	return b.String(), peak
}

// sparklines draws the sparklines of views (at most maxPoints points each) from the samples the
// sampler holds now: the overview draws only those of the queues it lists.
func (s *sampler) sparklines(views []QueueView, maxPoints int) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	for i := range views {
		if sr, ok := s.series[views[i].Name]; ok && sr.reg.TableOID == views[i].tableOID {
			views[i].Spark, views[i].SparkPeak = sparkline(sr.samples, maxPoints)
		}
	}
}

// QueueView is what the pages show of one queue from the sampler.
type QueueView struct {
	Name        string
	Table       string
	Partitioned bool
	MaxAttempts int
	Stats       Stats
	HasStats    bool
	Err         string
	SampledAt   time.Time
	Rate1m      Rate
	Rate5m      Rate
	Rate15m     Rate
	// Spark is the sparkline's points (sparkline), drawn only for the queues a page shows.
	Spark     string
	SparkPeak float64
	tableOID  uint32
	// Ready is Stats.Ready without the rows blocked behind a wedged head (Blocked): what a claim
	// could take now. outbox.stats counts every due, unleased row as ready, also a key's rows
	// behind a head that does not move.
	Ready int64
	// Blocked is how many rows wait behind the heads of the wedged partitions (Wedged); at least
	// that many when Wedged is cut at the list's limit (BlockedAtLeast).
	Blocked        int64
	BlockedAtLeast bool
	// Wedged are the partitions whose oldest pending row is older than WedgedAfter, oldest first
	// (at most 50), as of the last sample; WedgedErr says why they could not be read.
	Wedged    []Wedged
	WedgedErr string
	// Rebuild, as of the last sample, says that claims are rebuilding the partition heads and how far
	// (nil: they are not, or it can not be known); meanwhile Wedged lists only keys the rebuild has
	// reached. RebuildErr says why that could not be read.
	Rebuild    *HeadsRebuild
	RebuildErr string
	// Problems are what a person should look at, most urgent first; none for a healthy queue.
	Problems []Problem
	// FailingSince is when the reads of this queue that keep failing (Err) began to fail.
	FailingSince time.Time
	// Stale, when set, says why the figures shown are not live: reading them fails (since when,
	// and why), or none was read for longer than a read may take.
	Stale string
	// Gone: the queue's table no longer exists (dropped outside outbox.drop_queue), as the sampler
	// saw first at GoneSince. It has no figures, and the pages offer no action on it.
	Gone      bool
	GoneSince time.Time
}

// view is what the pages show of one queue, with a sparkline of at most sparkPoints points (none
// for 0).
func (s *sampler) view(name string, sparkPoints int) (QueueView, queueReg, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	sr, ok := s.series[name]
	if !ok {
		return QueueView{}, queueReg{}, false
	}
	v := QueueView{Name: name, Table: sr.reg.Table, Partitioned: sr.reg.PartitionColumn != nil, MaxAttempts: sr.reg.MaxAttempts,
		tableOID: sr.reg.TableOID, Gone: sr.reg.Gone, GoneSince: sr.goneSince}
	if sr.err != nil {
		v.Err = describe(sr.err)
	}
	if n := len(sr.samples); n > 0 {
		last := sr.samples[n-1]
		v.Stats, v.HasStats, v.SampledAt = last.stats, true, last.at
		v.Rate1m = rateOver(sr.samples, time.Minute)
		v.Rate5m = rateOver(sr.samples, 5*time.Minute)
		v.Rate15m = rateOver(sr.samples, 15*time.Minute)
		v.Spark, v.SparkPeak = sparkline(sr.samples, sparkPoints)
		v.Blocked = last.blocked
		v.Ready = last.stats.Ready - last.blocked
		v.Wedged = sr.wedged
		v.BlockedAtLeast = len(sr.wedged) >= listLimit
		if sr.wedgedErr != nil {
			v.WedgedErr = describe(sr.wedgedErr)
		}
		v.Rebuild = sr.rebuild
		if sr.rebuildErr != nil {
			v.RebuildErr = describe(sr.rebuildErr)
		}
	}
	now := time.Now()
	if sr.err != nil {
		v.FailingSince = sr.failingSince
	}
	v.Stale = staleText(v, s.staleAfter(), now)
	v.Problems = problems(v, sr.samples, s.wedgedAfter, now)
	return v, sr.reg, true
}

// staleText says why a queue's figures are not live, or "" when they are.
func staleText(v QueueView, staleAfter time.Duration, now time.Time) string {
	var figures string
	switch {
	case v.HasStats && (v.Err != "" || now.Sub(v.SampledAt) > staleAfter):
		figures = fmt.Sprintf("figures from %s (%s)", timetext.Format(v.SampledAt), fromNow(v.SampledAt, now))
	case v.Err != "":
		figures = "no figures yet"
	default:
		return ""
	}
	if v.Err == "" {
		return figures + ", none read since"
	}
	return fmt.Sprintf("%s; reading them fails since %s (%s): %s", figures, timetext.Format(v.FailingSince),
		fromNow(v.FailingSince, now), v.Err)
}

// overviewState is what the overview says about the sampler besides the queues' views.
type overviewState struct {
	// At is when the newest figures shown were read (zero: none yet).
	At time.Time
	// ListErr is why the registry (outbox.queues) could not be read, since ListFailingSince; the
	// queues and figures shown are then those of the last pass that read it.
	ListErr          error
	ListFailingSince time.Time
	// Stale lists the sentences of the overview's notice that figures are not live (none: all are).
	Stale []string
}

// maxStaleQueues is how many queues with old figures the overview's notice names before "and N more".
const maxStaleQueues = 5

// unknownQueue says why name is not among the queues known: "" when the registry was read and has
// no such queue, else that it could not be read (since when, why), so a page never calls a queue
// unregistered that it could not look up (a login without SELECT on outbox.queues, a database
// down when the console started).
func (s *sampler) unknownQueue(name string) string {
	s.mu.RLock()
	err, since := s.listErr, s.listFailingSince
	s.mu.RUnlock()
	if err == nil {
		return ""
	}
	return fmt.Sprintf("Queue %s could not be looked up: the queues (outbox.queues) could not be read since %s (%s): %s.",
		name, timetext.Format(since), fromNow(since, time.Now()), describe(err))
}

// overview returns every queue's view in registry order, without sparklines (sparklines draws those
// of the queues a page lists), and what the page says about the sampler.
func (s *sampler) overview() ([]QueueView, overviewState) {
	now := time.Now()
	s.mu.RLock()
	names := append([]string(nil), s.queues...)
	st := overviewState{ListErr: s.listErr, ListFailingSince: s.listFailingSince}
	passAt := s.passAt
	s.mu.RUnlock()
	views := make([]QueueView, 0, len(names))
	for _, n := range names {
		if v, _, ok := s.view(n, 0); ok {
			views = append(views, v)
		}
	}
	if st.ListErr != nil {
		st.Stale = append(st.Stale, fmt.Sprintf("The queues (outbox.queues) could not be read since %s (%s): %s. Every figure below is from before.",
			timetext.Format(st.ListFailingSince), fromNow(st.ListFailingSince, now), describe(st.ListErr)))
	} else if !passAt.IsZero() && now.Sub(passAt) > s.staleAfter() {
		st.Stale = append(st.Stale, fmt.Sprintf("The sampler has not started a pass since %s (%s).", timetext.Format(passAt), fromNow(passAt, now)))
	}
	var stale []string
	for _, v := range views {
		if v.SampledAt.After(st.At) {
			st.At = v.SampledAt
		}
		if v.Stale != "" {
			stale = append(stale, v.Name+": "+v.Stale+".")
		}
	}
	if len(stale) > maxStaleQueues {
		stale = append(stale[:maxStaleQueues], fmt.Sprintf("and %d more queue(s): see their rows.", len(stale)-maxStaleQueues))
	}
	st.Stale = append(st.Stale, stale...)
	return views, st
}
