package escalation

import (
	"context"
	"encoding/json"
	"net/http"
	"sort"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

const (
	// healthPingTimeout bounds the database ping of one health check.
	healthPingTimeout = 2 * time.Second
	// maxOverrunsReported bounds Health.Overrunning (the gauge
	// pgdrain_escalation_overrunning_deliveries counts every one).
	maxOverrunsReported = 10
)

// Engine states, as Health reports them.
const (
	stateIdle     = "idle"     // Run not called
	stateStarting = "starting" // Run waits for the database before its first take
	stateRunning  = "running"
	stateStopped  = "stopped"
)

// Health is the engine's state as its health endpoint reports it.
type Health struct {
	// OK is true while Run runs past its start, the database answers a ping, the last take of due
	// steps succeeded (Error is empty) and no delivery overruns (Overrunning is empty).
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
	// Overrunning lists the deliveries the engine gave up on because their Notifier ignores its
	// context (still running OverrunGrace after StepTimeout) and that have not returned yet,
	// oldest first, at most ten (pgdrain_escalation_overrunning_deliveries counts them all).
	Overrunning []Overrun `json:"overrunning,omitempty"`
}

// Overrun is a delivery the engine gave up on that is still running: its Notifier ignores its
// context.
type Overrun struct {
	// Channel is the channel whose Notifier does not return.
	Channel string `json:"channel"`
	// Step is the step being delivered (Step.IdempotencyKey).
	Step string `json:"step"`
	// Started is when the call began.
	Started time.Time `json:"started"`
}

// health is what Run records for Health.
type health struct {
	mu          sync.Mutex
	state       string
	lastTake    time.Time
	err         error
	overruns    map[uint64]Overrun // deliveries given up on and still running, by a number of their own
	lastOverrun uint64
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

// overrunStarted records a delivery given up on that still runs and returns its number;
// overrunEnded forgets it once the call returns.
func (h *health) overrunStarted(o Overrun) uint64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.overruns == nil {
		h.overruns = map[uint64]Overrun{}
	}
	h.lastOverrun++
	h.overruns[h.lastOverrun] = o
	return h.lastOverrun
}

func (h *health) overrunEnded(id uint64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.overruns, id)
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
	for _, o := range e.health.overruns {
		o.Started = o.Started.UTC()
		h.Overrunning = append(h.Overrunning, o)
	}
	e.health.mu.Unlock()
	sort.Slice(h.Overrunning, func(i, j int) bool { return h.Overrunning[i].Started.Before(h.Overrunning[j].Started) })
	if len(h.Overrunning) > maxOverrunsReported {
		h.Overrunning = h.Overrunning[:maxOverrunsReported]
	}
	if h.State == "" {
		h.State = stateIdle
	}
	pctx, cancel := context.WithTimeout(ctx, healthPingTimeout)
	defer cancel()
	if err := e.pool.Ping(pctx); err != nil {
		h.Database = err.Error()
	}
	// A ping is not enough: a database that answers pings but refuses every take (a DSN that now
	// reaches a read-only standby, a revoked grant) delivers nothing.
	h.OK = h.State == stateRunning && h.Database == "ok" && h.Error == "" && len(h.Overrunning) == 0
	return h
}

// Handler serves GET /metrics (Prometheus text format, from gatherer) and GET /healthz (Health as
// JSON: 200 when OK, 503 otherwise: while the engine starts, after it stopped, while its
// database does not answer or its last take failed, and while a Notifier it gave up on still runs).
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
