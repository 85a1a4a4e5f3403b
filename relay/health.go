package relay

import (
	"context"
	"encoding/json"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// healthPingTimeout bounds the database ping of one health check.
const healthPingTimeout = 2 * time.Second

// Health is the relay's state as the health endpoint reports it.
type Health struct {
	// OK is true while the relay runs, reaches its database and every queue's drainer runs.
	OK bool `json:"ok"`
	// Database is "ok" or why the pool could not be pinged.
	Database string `json:"database"`
	// Stopping is true once shutdown began (or a drainer failed).
	Stopping bool `json:"stopping"`
	// Queues has one entry per route.
	Queues []QueueHealth `json:"queues"`
}

// QueueHealth is one route's state: "idle" (Run not called), "running", "stopped" or "failed".
type QueueHealth struct {
	Queue string `json:"queue"`
	Sink  string `json:"sink"`
	State string `json:"state"`
	Error string `json:"error,omitempty"`
}

// Health pings the database and reports every route's state.
func (r *Relay) Health(ctx context.Context) Health {
	h := Health{Database: "ok", Stopping: r.stopping.Load()}
	pctx, cancel := context.WithTimeout(ctx, healthPingTimeout)
	defer cancel()
	if err := r.pool.Ping(pctx); err != nil {
		h.Database = err.Error()
	}
	h.OK = h.Database == "ok" && !h.Stopping && r.running.Load()
	for _, x := range r.routes {
		x.mu.Lock()
		q := QueueHealth{Queue: x.Queue, Sink: x.SinkKind, State: x.state}
		if x.err != nil {
			q.Error = x.err.Error()
		}
		x.mu.Unlock()
		h.OK = h.OK && q.State == "running"
		h.Queues = append(h.Queues, q)
	}
	return h
}

// Handler serves GET /metrics (Prometheus text format, from gatherer) and GET /healthz (Health as
// JSON: 200 when OK, 503 otherwise, so an orchestrator restarts a relay that lost its database or
// a queue).
func (r *Relay) Handler(gatherer prometheus.Gatherer) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(gatherer, promhttp.HandlerOpts{}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, req *http.Request) {
		h := r.Health(req.Context())
		w.Header().Set("Content-Type", "application/json")
		if !h.OK {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
		_ = json.NewEncoder(w).Encode(h)
	})
	return mux
}
