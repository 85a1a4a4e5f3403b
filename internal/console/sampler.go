package console

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
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
	// wedged are the partitions wedged for longer than wedgedAfter as of the last reading (read
	// only when the oldest pending row is that old: a queue without one has none), and wedgedErr
	// why they could not be read.
	wedged    []Wedged
	wedgedErr error
}

// reading is what one pass reads of one queue.
type reading struct {
	sample    sample
	err       error
	wedged    []Wedged
	wedgedErr error
}

// sampler reads every queue's gauges once per Refresh for all viewers: the pages never call
// outbox.stats themselves, so their number does not multiply its cost.
type sampler struct {
	db          *pgxpool.Pool
	history     time.Duration
	wedgedAfter time.Duration

	mu      sync.RWMutex
	queues  []string // registry order
	series  map[string]*series
	listErr error
	at      time.Time
}

func newSampler(db *pgxpool.Pool, history, wedgedAfter time.Duration) *sampler {
	return &sampler{db: db, history: history, wedgedAfter: wedgedAfter, series: map[string]*series{}}
}

// read reads one queue: outbox.stats and the insert counter, and on a partitioned queue whose
// oldest pending row is older than wedgedAfter its wedged partitions (outbox.wedged_partitions, at
// most listLimit), whose successors stats counts as ready although no claim can take them.
func (s *sampler) read(ctx context.Context, q queueReg) reading {
	st, ins, err := readStats(ctx, s.db, q)
	r := reading{sample: sample{at: time.Now(), stats: st, inserted: ins}, err: err}
	if err != nil || q.PartitionColumn == nil || st.OldestPendingAge == nil || *st.OldestPendingAge < s.wedgedAfter {
		return r
	}
	r.wedged, r.wedgedErr = readWedged(ctx, s.db, q.Name, s.wedgedAfter)
	for _, w := range r.wedged {
		r.sample.blocked += max(0, w.Pending-1)
	}
	r.sample.blocked = min(r.sample.blocked, st.Ready)
	return r
}

// keep records a reading in sr, dropping samples older than History.
func (s *sampler) keep(sr *series, r reading) {
	sr.err = r.err
	if r.err != nil {
		return
	}
	sr.wedged, sr.wedgedErr = r.wedged, r.wedgedErr
	sr.samples = append(sr.samples, r.sample)
	cut := 0
	for cut < len(sr.samples)-1 && sr.samples[cut].at.Before(r.sample.at.Add(-s.history)) {
		cut++
	}
	sr.samples = append([]sample(nil), sr.samples[cut:]...)
}

// refresh reads one queue again now, so that the page an action redirects to shows what it changed.
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
	r := s.read(ctx, reg)
	s.mu.Lock()
	defer s.mu.Unlock()
	if cur, ok := s.series[name]; ok && cur.reg.TableOID == reg.TableOID {
		s.keep(cur, r)
	}
}

// sampleOnce reads the registry and the gauges of every queue. A queue whose stats fail keeps its
// history and shows the error; a failing registry read keeps everything and shows that error.
func (s *sampler) sampleOnce(ctx context.Context) {
	regs, err := listQueues(ctx, s.db)
	if err != nil {
		s.mu.Lock()
		s.listErr, s.at = err, time.Now()
		s.mu.Unlock()
		return
	}
	readings := make([]reading, len(regs))
	for i, q := range regs {
		readings[i] = s.read(ctx, q)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.listErr, s.at = nil, time.Now()
	next := make(map[string]*series, len(regs))
	s.queues = s.queues[:0]
	for i, q := range regs {
		sr := s.series[q.Name]
		if sr == nil || sr.reg.TableOID != q.TableOID {
			sr = &series{} // a new queue, or the same name on another table: start afresh
		}
		sr.reg = q
		s.keep(sr, readings[i])
		next[q.Name] = sr
		s.queues = append(s.queues, q.Name)
	}
	s.series = next
}

// run samples every interval until ctx ends.
func (s *sampler) run(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			s.sampleOnce(ctx)
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

// sparkline renders delivered-per-minute between successive samples as SVG polyline points in a
// 300x40 box, newest on the right, so that the page can draw it without JavaScript.
func sparkline(samples []sample) (points string, peak float64) {
	if len(samples) < 2 {
		return "", 0
	}
	rates := make([]float64, 0, len(samples)-1)
	for i := 1; i < len(samples); i++ {
		r := rateOver(samples[i-1:i+1], samples[i].at.Sub(samples[i-1].at))
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
		fmt.Fprintf(&b, "%.1f,%.1f ", x, y)
	}
	return strings.TrimSpace(b.String()), peak
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
	Spark       string
	SparkPeak   float64
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
	// Problems are what a person should look at, most urgent first; none for a healthy queue.
	Problems []Problem
}

func (s *sampler) view(name string) (QueueView, queueReg, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	sr, ok := s.series[name]
	if !ok {
		return QueueView{}, queueReg{}, false
	}
	v := QueueView{Name: name, Table: sr.reg.Table, Partitioned: sr.reg.PartitionColumn != nil, MaxAttempts: sr.reg.MaxAttempts}
	if sr.err != nil {
		v.Err = describe(sr.err)
	}
	if n := len(sr.samples); n > 0 {
		last := sr.samples[n-1]
		v.Stats, v.HasStats, v.SampledAt = last.stats, true, last.at
		v.Rate1m = rateOver(sr.samples, time.Minute)
		v.Rate5m = rateOver(sr.samples, 5*time.Minute)
		v.Rate15m = rateOver(sr.samples, 15*time.Minute)
		v.Spark, v.SparkPeak = sparkline(sr.samples)
		v.Blocked = last.blocked
		v.Ready = last.stats.Ready - last.blocked
		v.Wedged = sr.wedged
		v.BlockedAtLeast = len(sr.wedged) >= listLimit
		if sr.wedgedErr != nil {
			v.WedgedErr = describe(sr.wedgedErr)
		}
	}
	v.Problems = problems(v, sr.samples, s.wedgedAfter, time.Now())
	return v, sr.reg, true
}

// overview returns every queue's view in registry order, the time of the last pass and the
// registry error of that pass, if any.
func (s *sampler) overview() ([]QueueView, time.Time, error) {
	s.mu.RLock()
	names := append([]string(nil), s.queues...)
	at, err := s.at, s.listErr
	s.mu.RUnlock()
	views := make([]QueueView, 0, len(names))
	for _, n := range names {
		if v, _, ok := s.view(n); ok {
			views = append(views, v)
		}
	}
	return views, at, err
}
