package escalation

import (
	"context"
	"encoding/json"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// healthPingTimeout bounds the database ping of one health check.
const healthPingTimeout = 2 * time.Second

// Engine states, as Health reports them.
const (
	stateIdle     = "idle"     // Run not called
	stateStarting = "starting" // Run waits for the database before its first take
	stateRunning  = "running"
	stateStopped  = "stopped"
)

// Health is the engine's state as its health endpoint reports it.
type Health struct {
	// OK is true while Run runs past its start and the database answers a ping.
	OK bool `json:"ok"`
	// State is "idle" (Run not called), "starting" (waiting for the database at start),
	// "running" or "stopped".
	State string `json:"state"`
	// Database is "ok" or why the pool could not be pinged.
	Database string `json:"database"`
	// LastTake is when a take of due steps last succeeded (nil before the first).
	LastTake *time.Time `json:"last_take,omitempty"`
	// Error is why the last take failed, if it did (cleared by the next one that succeeds).
	Error string `json:"error,omitempty"`
}

// health is what Run records for Health.
type health struct {
	mu       sync.Mutex
	state    string
	lastTake time.Time
	err      error
}

func (h *health) setState(s string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.state = s
}

// took records the outcome of one take.
func (h *health) took(at time.Time, err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.err = err
	if err == nil {
		h.lastTake = at
	}
}

// Health pings the database and reports the engine's state.
func (e *Engine) Health(ctx context.Context) Health {
	e.health.mu.Lock()
	h := Health{State: e.health.state, Database: "ok"}
	if !e.health.lastTake.IsZero() {
		at := e.health.lastTake.UTC()
		h.LastTake = &at
	}
	if e.health.err != nil {
		h.Error = e.health.err.Error()
	}
	e.health.mu.Unlock()
	if h.State == "" {
		h.State = stateIdle
	}
	pctx, cancel := context.WithTimeout(ctx, healthPingTimeout)
	defer cancel()
	if err := e.pool.Ping(pctx); err != nil {
		h.Database = err.Error()
	}
	h.OK = h.State == stateRunning && h.Database == "ok"
	return h
}

// Handler serves GET /metrics (Prometheus text format, from gatherer) and GET /healthz (Health as
// JSON: 200 when OK, 503 otherwise: while the engine starts, after it stopped, and while its
// database does not answer).
func (e *Engine) Handler(gatherer prometheus.Gatherer) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(gatherer, promhttp.HandlerOpts{}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, req *http.Request) {
		h := e.Health(req.Context())
		w.Header().Set("Content-Type", "application/json")
		if !h.OK {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
		_ = json.NewEncoder(w).Encode(h)
	})
	return mux
}
