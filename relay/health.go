package relay

import (
	"context"
	"encoding/json"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/pgdrain/pgdrain/internal/headsrebuild"
)

// healthPingTimeout bounds the database ping of one health check.
const healthPingTimeout = 2 * time.Second

// Health is the relay's state as the health endpoint reports it.
type Health struct {
	// OK is true while the relay runs, reaches its database and every queue's drainer runs and its
	// last claim or result flush succeeded (no queue has an Error).
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
	// LastClaim is when the queue's drainer last claimed (drainer.Health; nil before the first).
	LastClaim *time.Time `json:"last_claim,omitempty"`
	// Error is why the queue failed, or, while it runs, why its last claim or result flush failed
	// (cleared by the next one that succeeds).
	Error string `json:"error,omitempty"`
	// Cause says what Error means when the database is unavailable or refuses writes (drainer.Health):
	// for a refused write, a standby or default_transaction_read_only = on, and where it was set.
	Cause string `json:"cause,omitempty"`
	// HeadsRebuild says how far the queue's claims are in rebuilding its partition heads after a
	// crash, a promotion or a restore (outbox.heads_rebuild): keys no part has reached wait for
	// theirs meanwhile. Not a failure: the relay's own claims rebuild them, a part per claim.
	HeadsRebuild string `json:"heads_rebuild,omitempty"`
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
		// A ping is not enough: a database that answers pings but refuses every claim (a primary
		// whose default_transaction_read_only is on, a standby, a revoked grant) delivers nothing.
		dh := x.drainer.Health()
		if !dh.LastClaim.IsZero() {
			at := dh.LastClaim.UTC()
			q.LastClaim = &at
		}
		if q.Error == "" && q.State == "running" && dh.Err != nil {
			q.Error, q.Cause = dh.Err.Error(), dh.Cause
		}
		h.OK = h.OK && q.State == "running" && q.Error == ""
		// Asked only of a database that answered the ping; what it can not say is left out.
		if h.Database == "ok" {
			if p, _, err := headsrebuild.Read(pctx, r.pool, x.Queue); err == nil && p != nil {
				q.HeadsRebuild = p.String()
			}
		}
		h.Queues = append(h.Queues, q)
	}
	return h
}

// Handler serves GET /metrics (Prometheus text format, from gatherer) and GET /healthz (Health as
// JSON: 200 when OK, 503 otherwise, so an orchestrator restarts a relay that lost its database or
// a queue, and sees one whose claims or results fail).
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
