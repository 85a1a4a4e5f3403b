package drainer

import (
	"context"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
)

// scrapeTimeout bounds the outbox.stats call of one scrape.
const scrapeTimeout = 5 * time.Second

// metrics is the drainer's prometheus.Collector. Counters are kept whether or not it is
// registered; the gauges come from one outbox.stats call per scrape.
type metrics struct {
	table  string
	pool   *pgxpool.Pool
	logger *slog.Logger

	results       *prometheus.CounterVec
	leaseLost     prometheus.Counter
	repairs       *prometheus.CounterVec
	claimDuration *prometheus.HistogramVec
	backlog       *prometheus.Desc
	oldestAge     *prometheus.Desc
	poisoned      *prometheus.Desc
}

func newMetrics(table string, pool *pgxpool.Pool, logger *slog.Logger) *metrics {
	labels := prometheus.Labels{"table": table}
	m := &metrics{
		table:  table,
		pool:   pool,
		logger: logger,
		results: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name:        "outbox_results_total",
			Help:        "Results recorded by this drainer, by outcome (sent, transient, permanent).",
			ConstLabels: labels,
		}, []string{"outcome"}),
		leaseLost: prometheus.NewCounter(prometheus.CounterOpts{
			Name:        "outbox_lease_lost_total",
			Help:        "Results refused because the lease was no longer this drainer's (the row was claimed again).",
			ConstLabels: labels,
		}),
		repairs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "pgdrain_repairs_total",
			Help: "Problems in derived state (partition heads, floors, clocks, the registration) that this " +
				"drainer's repair pass found and fixed: pending rows no claim could reach. Any increase is a bug: report it.",
			ConstLabels: prometheus.Labels{"queue": table},
		}, []string{"cause"}),
		claimDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:        "outbox_claim_duration_seconds",
			Help:        "Duration of one claim (claim_batch or claim_locked).",
			ConstLabels: labels,
			Buckets:     prometheus.ExponentialBuckets(0.0005, 2, 14),
		}, []string{"mode"}),
		backlog: prometheus.NewDesc("outbox_backlog_depth",
			"Pending rows: unsent and not poisoned.", nil, labels),
		oldestAge: prometheus.NewDesc("outbox_oldest_pending_age_seconds",
			"Age of the oldest pending row (0 when none): grows while any partition is wedged.", nil, labels),
		poisoned: prometheus.NewDesc("outbox_poisoned",
			"Poisoned rows: unsent with attempt_count at max_attempts.", nil, labels),
	}
	for _, o := range []Disposition{DispositionSent, DispositionTransient, DispositionPermanent} {
		m.results.WithLabelValues(o.String())
	}
	for _, mode := range []ClaimMode{ClaimLease, ClaimLock} {
		m.claimDuration.WithLabelValues(mode.String())
	}
	// Export the causes outbox.repair knows at zero, so that increase() sees the first repair.
	for _, cause := range repairCauses {
		m.repairs.WithLabelValues(cause)
	}
	return m
}

func (m *metrics) recorded(d Disposition) { m.results.WithLabelValues(d.String()).Inc() }

func (m *metrics) repaired(cause string) { m.repairs.WithLabelValues(cause).Inc() }

func (m *metrics) observeClaim(mode ClaimMode, d time.Duration) {
	m.claimDuration.WithLabelValues(mode.String()).Observe(d.Seconds())
}

// Describe implements prometheus.Collector.
func (m *metrics) Describe(ch chan<- *prometheus.Desc) {
	m.results.Describe(ch)
	m.leaseLost.Describe(ch)
	m.repairs.Describe(ch)
	m.claimDuration.Describe(ch)
	ch <- m.backlog
	ch <- m.oldestAge
	ch <- m.poisoned
}

// Collect implements prometheus.Collector. When outbox.stats fails the gauges are left out of
// the scrape (and the failure logged) rather than failing the whole scrape.
func (m *metrics) Collect(ch chan<- prometheus.Metric) {
	m.results.Collect(ch)
	m.leaseLost.Collect(ch)
	m.repairs.Collect(ch)
	m.claimDuration.Collect(ch)
	ctx, cancel := context.WithTimeout(context.Background(), scrapeTimeout)
	defer cancel()
	s, err := queryStats(ctx, m.pool, m.table)
	if err != nil {
		m.logger.Warn("reading gauges for metrics", "err", err)
		return
	}
	ch <- prometheus.MustNewConstMetric(m.backlog, prometheus.GaugeValue, float64(s.pending))
	ch <- prometheus.MustNewConstMetric(m.oldestAge, prometheus.GaugeValue, s.oldestAgeSeconds)
	ch <- prometheus.MustNewConstMetric(m.poisoned, prometheus.GaugeValue, float64(s.poisoned))
}
