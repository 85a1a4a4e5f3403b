package drainer

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics is one Run's handle on its queue's series in the collector of its Registerer
// (collector.go). It holds the children it increments, so that an Applier that outlives Run (its
// result dropped) and counts a lost lease after Run unregistered changes nothing exported.
type metrics struct {
	results   map[Disposition]prometheus.Counter
	leaseLost prometheus.Counter
	claims    map[ClaimMode]prometheus.Observer
	repairs   *prometheus.CounterVec // curried with the queue: causes are found at run time
}

func (m *metrics) recorded(d Disposition) { m.results[d].Inc() }

func (m *metrics) repaired(cause string) { m.repairs.WithLabelValues(cause).Inc() }

func (m *metrics) observeClaim(mode ClaimMode, d time.Duration) {
	m.claims[mode].Observe(d.Seconds())
}

// Metric names: the public contract of WithMetrics (docs/operations.md, "Metrics to alert on";
// dashboards are built against them). Every one starts with pgdrain_ and labels the queue "queue".
const (
	metricResults       = "pgdrain_outbox_results_total"
	metricLeaseLost     = "pgdrain_outbox_lease_lost_total"
	metricClaimDuration = "pgdrain_outbox_claim_duration_seconds"
	metricRepairs       = "pgdrain_repairs_total"
	metricBacklog       = "pgdrain_outbox_backlog_depth"
	metricOldestAge     = "pgdrain_outbox_oldest_pending_age_seconds"
	metricPoisoned      = "pgdrain_outbox_poisoned"
	metricRebuilding    = "pgdrain_outbox_heads_rebuilding"
)
