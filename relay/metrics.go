package relay

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the relay's own series, beside each drainer's (drainer.WithMetrics).
type metrics struct {
	deliveries *prometheus.CounterVec
	duration   *prometheus.HistogramVec
	retryAfter *prometheus.CounterVec
}

func newMetrics() *metrics {
	return &metrics{
		deliveries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "pgdrain_relay_deliveries_total",
			Help: "Events a sink delivered or refused, by queue, sink kind and outcome (sent, transient, permanent).",
		}, []string{"queue", "sink", "outcome"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "pgdrain_relay_deliver_duration_seconds",
			Help:    "Duration of one Deliver call of a sink (one batch).",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16),
		}, []string{"queue", "sink"}),
		retryAfter: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "pgdrain_relay_retry_after_total",
			Help: "Transient results whose peer asked for a later retry (Retry-After), recorded as the row's next attempt " +
				"instead of the queue's backoff.",
		}, []string{"queue", "sink"}),
	}
}

func (m *metrics) register(reg prometheus.Registerer) error {
	for _, c := range []prometheus.Collector{m.deliveries, m.duration, m.retryAfter} {
		if err := reg.Register(c); err != nil {
			return err
		}
	}
	return nil
}

// observer returns the batcher's callback for one route: counts per outcome, the call's duration.
func (m *metrics) observer(queue, sink string) func([]Event, []Result, time.Duration) {
	for _, o := range []Outcome{Sent, Transient, Permanent} {
		m.deliveries.WithLabelValues(queue, sink, o.String())
	}
	m.retryAfter.WithLabelValues(queue, sink)
	return func(_ []Event, results []Result, took time.Duration) {
		m.duration.WithLabelValues(queue, sink).Observe(took.Seconds())
		for _, r := range results {
			m.deliveries.WithLabelValues(queue, sink, r.Outcome.String()).Inc()
			if r.Outcome == Transient && r.RetryAfter > 0 {
				m.retryAfter.WithLabelValues(queue, sink).Inc()
			}
		}
	}
}
