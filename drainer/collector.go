package drainer

import (
	"context"
	"fmt"
	"log/slog"
	"reflect"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
)

// scrapeTimeout bounds the outbox.stats calls of one scrape (one per queue, concurrently).
const scrapeTimeout = 5 * time.Second

// collectors holds the one collector of each Registerer that running drainers registered with.
// Every drainer of a process that uses the same Registerer shares it: each queue's series exist
// once however many drainers of the queue run, counters add up what all of them did, and a scrape
// reads outbox.stats once per queue rather than once per drainer.
var collectors = struct {
	sync.Mutex
	m map[prometheus.Registerer]*collector
}{m: map[prometheus.Registerer]*collector{}}

// collector is a prometheus.Collector of the drainer metrics of every queue that has a running
// drainer using its Registerer.
type collector struct {
	reg prometheus.Registerer // nil: not registered (a drainer without WithMetrics)

	mu     sync.Mutex
	queues map[string]*queueSource

	results       *prometheus.CounterVec
	leaseLost     *prometheus.CounterVec
	claimDuration *prometheus.HistogramVec
	repairs       *prometheus.CounterVec
	backlog       *prometheus.Desc
	oldestAge     *prometheus.Desc
	poisoned      *prometheus.Desc
	rebuilding    *prometheus.Desc
}

// queueSource is where the gauges of one queue come from: the pool of the first of its running
// drainers (drainers of one queue name in one process are expected to drain one database), and
// how many drainers of the queue are running.
type queueSource struct {
	pool    *pgxpool.Pool
	logger  *slog.Logger
	running int
}

func newCollector(reg prometheus.Registerer) *collector {
	queue := []string{"queue"}
	return &collector{
		reg:    reg,
		queues: map[string]*queueSource{},
		results: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: metricResults,
			Help: "Results recorded by this process's drainers, by outcome (sent, transient, permanent).",
		}, []string{"queue", "outcome"}),
		leaseLost: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: metricLeaseLost,
			Help: "Results refused because the lease was no longer this drainer's (the row was claimed again).",
		}, queue),
		claimDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    metricClaimDuration,
			Help:    "Duration of one claim (claim_batch or claim_locked).",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 14),
		}, []string{"queue", "mode"}),
		repairs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: metricRepairs,
			Help: "Problems in derived state (partition heads, floors, clocks, the registration) that the " +
				"drainers' repair pass found and fixed: pending rows no claim could reach, or notes of transactions that ended " +
				"without their commit step (stale_notes). Any increase is a bug: report it.",
		}, []string{"queue", "cause"}),
		backlog: prometheus.NewDesc(metricBacklog,
			"Pending rows: unsent and not poisoned. Table-wide: aggregate replicas with max by (queue), never sum.",
			queue, nil),
		oldestAge: prometheus.NewDesc(metricOldestAge,
			"Age of the oldest pending row (0 when none): grows while any partition is wedged. "+
				"Table-wide: aggregate replicas with max by (queue), never sum.", queue, nil),
		poisoned: prometheus.NewDesc(metricPoisoned,
			"Poisoned rows: unsent with attempt_count at max_attempts. Table-wide: aggregate replicas with "+
				"max by (queue), never sum.", queue, nil),
		rebuilding: prometheus.NewDesc(metricRebuilding,
			"1 while claims rebuild the queue's partition heads after a crash, a promotion or a restore "+
				"without the unlogged tables (keys no part has reached wait for their part), else 0. "+
				"Table-wide: aggregate replicas with max by (queue), never sum.", queue, nil),
	}
}

// joinMetrics adds a running drainer of queue to reg's collector, registering the collector with
// reg when it is the first drainer to use reg, and returns the drainer's handle and leave, which
// undoes it: the queue's series go when its last drainer leaves, and the collector is
// unregistered when no queue is left, so a drainer started again registers again. With a nil reg
// the handle counts into a collector nobody scrapes.
func joinMetrics(reg prometheus.Registerer, queue string, pool *pgxpool.Pool, logger *slog.Logger) (*metrics, func(), error) {
	if reg == nil || !reflect.TypeOf(reg).Comparable() {
		// A Registerer that can not be a map key gets a collector of its own per drainer; two
		// drainers of one queue then collide in it, as before collectors were shared.
		c := newCollector(reg)
		if reg != nil {
			if err := reg.Register(c); err != nil {
				return nil, nil, fmt.Errorf("registering metrics: %w", err)
			}
		}
		m := c.join(queue, pool, logger)
		return m, sync.OnceFunc(func() {
			if reg != nil {
				reg.Unregister(c)
			}
		}), nil
	}
	collectors.Lock()
	defer collectors.Unlock()
	c := collectors.m[reg]
	if c == nil {
		c = newCollector(reg)
		if err := reg.Register(c); err != nil {
			return nil, nil, fmt.Errorf("registering metrics: %w", err)
		}
		collectors.m[reg] = c
	}
	m := c.join(queue, pool, logger)
	return m, sync.OnceFunc(func() {
		collectors.Lock()
		defer collectors.Unlock()
		if c.last(queue) {
			// The collector goes with its last queue: nothing to delete from it, and a scrape
			// taken while it is unregistered still sees every count.
			reg.Unregister(c)
			delete(collectors.m, reg)
			return
		}
		c.leave(queue)
	}), nil
}

// join counts one more running drainer of queue and returns its handle, exporting every known
// label value at zero so that increase() sees the first event.
func (c *collector) join(queue string, pool *pgxpool.Pool, logger *slog.Logger) *metrics {
	c.mu.Lock()
	defer c.mu.Unlock()
	src := c.queues[queue]
	if src == nil {
		src = &queueSource{pool: pool, logger: logger}
		c.queues[queue] = src
	}
	src.running++
	m := &metrics{
		results:   map[Disposition]prometheus.Counter{},
		leaseLost: c.leaseLost.WithLabelValues(queue),
		claims:    map[ClaimMode]prometheus.Observer{},
		repairs:   c.repairs.MustCurryWith(prometheus.Labels{"queue": queue}),
	}
	for _, d := range []Disposition{DispositionSent, DispositionTransient, DispositionPermanent} {
		m.results[d] = c.results.WithLabelValues(queue, d.String())
	}
	for _, mode := range []ClaimMode{ClaimLease, ClaimLock} {
		m.claims[mode] = c.claimDuration.WithLabelValues(queue, mode.String())
	}
	for _, cause := range repairCauses {
		m.repairs.WithLabelValues(cause)
	}
	return m
}

// last reports whether the only running drainer left is one of queue.
func (c *collector) last(queue string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	src := c.queues[queue]
	return len(c.queues) == 1 && src != nil && src.running == 1
}

// leave counts one drainer of queue less and deletes the queue's series when it was the last.
func (c *collector) leave(queue string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	src := c.queues[queue]
	if src == nil {
		return
	}
	if src.running--; src.running == 0 {
		delete(c.queues, queue)
		only := prometheus.Labels{"queue": queue}
		c.results.DeletePartialMatch(only)
		c.leaseLost.DeletePartialMatch(only)
		c.claimDuration.DeletePartialMatch(only)
		c.repairs.DeletePartialMatch(only)
	}
}

// Describe implements prometheus.Collector.
func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	c.results.Describe(ch)
	c.leaseLost.Describe(ch)
	c.claimDuration.Describe(ch)
	c.repairs.Describe(ch)
	ch <- c.backlog
	ch <- c.oldestAge
	ch <- c.poisoned
	ch <- c.rebuilding
}

// Collect implements prometheus.Collector: the counters, and the gauges of every queue from one
// outbox.stats and one outbox.heads_rebuild call each, all bounded by scrapeTimeout. A queue whose call fails is left out of
// the scrape (and the failure logged) rather than failing the whole scrape.
func (c *collector) Collect(ch chan<- prometheus.Metric) {
	c.results.Collect(ch)
	c.leaseLost.Collect(ch)
	c.claimDuration.Collect(ch)
	c.repairs.Collect(ch)
	c.mu.Lock()
	sources := make(map[string]queueSource, len(c.queues))
	for q, src := range c.queues {
		sources[q] = *src
	}
	c.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), scrapeTimeout)
	defer cancel()
	var wg sync.WaitGroup
	for queue, src := range sources {
		wg.Go(func() {
			s, err := queryStats(ctx, src.pool, queue)
			if err != nil {
				src.logger.Warn("reading gauges for metrics", "err", err)
				return
			}
			ch <- prometheus.MustNewConstMetric(c.backlog, prometheus.GaugeValue, float64(s.pending), queue)
			ch <- prometheus.MustNewConstMetric(c.oldestAge, prometheus.GaugeValue, s.oldestAgeSeconds, queue)
			ch <- prometheus.MustNewConstMetric(c.poisoned, prometheus.GaugeValue, float64(s.poisoned), queue)
			rebuilding, known, err := queryHeadsRebuilding(ctx, src.pool, queue)
			if err != nil {
				src.logger.Warn("reading gauges for metrics", "err", err)
				return
			}
			if known {
				ch <- prometheus.MustNewConstMetric(c.rebuilding, prometheus.GaugeValue, b2f(rebuilding), queue)
			}
		})
	}
	wg.Wait()
}

// b2f is a gauge's value of a yes or no.
func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
