package escalation

import "github.com/prometheus/client_golang/prometheus"

// Outcomes of a taken step, as counted in TickResult and pgdrain_escalation_steps_total{outcome}.
const (
	outcomeDelivered = "delivered"
	outcomeFailed    = "failed"
	outcomeNotOurs   = "not_ours"
	outcomeReleased  = "released"
	outcomeUnserved  = "unserved"
	outcomeError     = "error"
)

// metrics is the engine's prometheus.Collector. Counters are kept whether or not it is registered.
type metrics struct {
	steps            *prometheus.CounterVec
	unservedSteps    *prometheus.CounterVec
	unservedChannels prometheus.Gauge
	overrunning      prometheus.Gauge
	unjournaled      prometheus.Gauge
}

func newMetrics() *metrics {
	m := &metrics{
		steps: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "pgdrain_escalation_steps_total",
			Help: "Escalation steps this engine took, by outcome: delivered, failed (recorded, delivery failed), " +
				"not_ours (apply_escalation refused), released (engine stopping), unserved (no notifier for " +
				"the channel: given back unapplied), error (SQL error; the lease runs out).",
		}, []string{"outcome"}),
		unservedSteps: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "pgdrain_escalation_unserved_steps_total",
			Help: "Due escalation steps given back unapplied because no notifier serves their channel " +
				"(a configuration error: the ladder waits until one does). Any increase needs a person.",
		}, []string{"channel"}),
		unservedChannels: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "pgdrain_escalation_unserved_channels",
			Help: "Channels used by escalation policies that no notifier of this engine serves, as of its start.",
		}),
		overrunning: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "pgdrain_escalation_overrunning_deliveries",
			Help: "Deliveries this engine gave up on because their notifier ignores its context (still running " +
				"a second past StepTimeout), and that have not returned yet. Each holds a goroutine; any needs a person.",
		}),
		unjournaled: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "pgdrain_escalation_unjournaled_steps",
			Help: "Escalation steps recorded (apply_escalation) and never journaled for longer than an engine delivers " +
				"and journals one: pages an engine killed between recording and delivering probably never sent " +
				"(alr.unjournaled_steps). The database's count, the same from every engine, as of the last check " +
				"(every minute); any needs a person.",
		}),
	}
	for _, o := range []string{outcomeDelivered, outcomeFailed, outcomeNotOurs, outcomeReleased, outcomeUnserved, outcomeError} {
		m.steps.WithLabelValues(o)
	}
	return m
}

// Describe implements prometheus.Collector.
func (m *metrics) Describe(ch chan<- *prometheus.Desc) {
	m.steps.Describe(ch)
	m.unservedSteps.Describe(ch)
	m.unservedChannels.Describe(ch)
	m.overrunning.Describe(ch)
	m.unjournaled.Describe(ch)
}

// Collect implements prometheus.Collector.
func (m *metrics) Collect(ch chan<- prometheus.Metric) {
	m.steps.Collect(ch)
	m.unservedSteps.Collect(ch)
	m.unservedChannels.Collect(ch)
	m.overrunning.Collect(ch)
	m.unjournaled.Collect(ch)
}
