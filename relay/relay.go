package relay

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"

	"github.com/pgdrain/pgdrain/drainer"
)

// ErrAlreadyRunning is returned by Run when the Relay is already running.
var ErrAlreadyRunning = errors.New("relay is already running")

// Option configures a Relay in New.
type Option func(*Relay)

// WithLogger sets the logger of the relay and its drainers (default slog.Default()).
func WithLogger(logger *slog.Logger) Option {
	return func(r *Relay) {
		if logger != nil {
			r.logger = logger
		}
	}
}

// WithMetrics registers every drainer's metrics (drainer.WithMetrics) and the relay's own
// (pgdrain_relay_deliveries_total{queue,sink,outcome}, pgdrain_relay_deliver_duration_seconds{queue,sink},
// pgdrain_relay_retry_after_total{queue,sink}) with reg.
func WithMetrics(reg prometheus.Registerer) Option {
	return func(r *Relay) { r.registerer = reg }
}

// WithTracerProvider traces every delivery attempt with tp (drainer.WithTracerProvider): a span
// per event, a child of the trace context the producer stored in the event's headers (W3C
// traceparent, tracestate), and the span's own trace context is what the sink sends (its
// traceparent and tracestate replace the producer's in Event.Headers), so the peer continues the
// trace from the delivery. Off by default: no span is made and the headers go as stored. A nil tp
// keeps it off.
func WithTracerProvider(tp trace.TracerProvider) Option {
	return func(r *Relay) { r.tracerProvider = tp }
}

// WithFanOut feeds each of fanOuts' queues to its sinks' queues (FanOut); Routes then deliver
// those queues (FanOutQueue) to the sinks. A queue fanned out may not also be a Route's queue.
func WithFanOut(fanOuts ...FanOut) Option {
	return func(r *Relay) { r.fanOuts = append(r.fanOuts, fanOuts...) }
}

// Relay runs one drainer per Route and hands every claimed event to the route's Sink. Run as many
// replicas as you like: the queue's claims (leases or row locks) share the work and keep each
// partition key's order, whatever the number of replicas.
type Relay struct {
	pool       *pgxpool.Pool
	routes     []*route
	logger     *slog.Logger
	registerer prometheus.Registerer
	// tracerProvider is WithTracerProvider's; nil: no spans.
	tracerProvider trace.TracerProvider
	fanOuts        []FanOut // WithFanOut's
	running        atomic.Bool
	stopping       atomic.Bool
}

// route is a Route at run time, or a FanOut's drainer (fanOut set, no Sink).
type route struct {
	Route
	fanOut   *fanOut
	drainer  *drainer.Drainer[json.RawMessage]
	batcher  *batcher
	logger   *slog.Logger
	failures *failureLog
	tracing  bool // put each delivery span's trace context into the event's headers

	mu    sync.Mutex
	state string // "idle", "running", "stopped", "failed"
	err   error
}

// New validates routes and builds their drainers; it does not touch the database (Run does).
// Every problem of every route is reported, each line naming the route and the field.
func New(pool *pgxpool.Pool, routes []Route, opts ...Option) (*Relay, error) {
	if pool == nil {
		return nil, errors.New("pool must not be nil")
	}
	r := &Relay{pool: pool, logger: slog.Default()}
	for _, o := range opts {
		o(r)
	}
	if len(routes) == 0 && len(r.fanOuts) == 0 {
		return nil, errors.New("routes must name at least one queue")
	}
	var errs []error
	fanned := map[string]int{}
	for i, f := range r.fanOuts {
		for _, line := range splitLines(f.Validate()) {
			errs = append(errs, fmt.Errorf("fan-out[%d] (%s): %s", i, f.Queue, line))
		}
		key := canonicalQueue(f.Queue)
		if j, dup := fanned[key]; dup && f.Queue != "" {
			errs = append(errs, fmt.Errorf("fan-out[%d] (%s): Queue is already fanned out by fan-out[%d]", i, f.Queue, j))
			continue
		}
		fanned[key] = i
	}
	seen := map[string]int{}
	for i, rt := range routes {
		for _, line := range splitLines(rt.Validate()) {
			errs = append(errs, fmt.Errorf("routes[%d] (%s): %s", i, rt.Queue, line))
		}
		key := canonicalQueue(rt.Queue)
		if j, dup := seen[key]; dup && rt.Queue != "" {
			errs = append(errs, fmt.Errorf("routes[%d] (%s): Queue is already relayed by routes[%d]: one route per queue", i, rt.Queue, j))
		}
		if j, dup := fanned[key]; dup && rt.Queue != "" {
			errs = append(errs, fmt.Errorf("routes[%d] (%s): Queue is fanned out by fan-out[%d]: nothing else may drain it; "+
				"route its sinks' queues (FanOutQueue) instead", i, rt.Queue, j))
		}
		seen[key] = i
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	m := newMetrics()
	if r.registerer != nil {
		if err := m.register(r.registerer); err != nil {
			return nil, fmt.Errorf("registering metrics: %w", err)
		}
	}
	for _, rt := range routes {
		rt = rt.withDefaults()
		x := &route{Route: rt, state: "idle", logger: r.logger.With("queue", rt.Queue, "sink", rt.SinkKind),
			tracing: r.tracerProvider != nil}
		x.batcher = newBatcher(rt.Sink, rt.BatchSize, rt.BatchLinger, m.observer(rt.Queue, rt.SinkKind))
		x.failures = newFailureLog(x.logger, rt.FailureLogInterval, rt.WedgeWarnAfter)
		dopts := []drainer.Option[json.RawMessage]{drainer.WithLogger[json.RawMessage](r.logger)}
		if r.registerer != nil {
			dopts = append(dopts, drainer.WithMetrics[json.RawMessage](r.registerer))
		}
		if r.tracerProvider != nil {
			dopts = append(dopts, drainer.WithTracerProvider[json.RawMessage](r.tracerProvider))
		}
		d, err := drainer.New(pool, rt.Drainer, decodeRaw, x.apply, dopts...)
		if err != nil {
			return nil, fmt.Errorf("queue %s: %w", rt.Queue, err)
		}
		x.drainer = d
		r.routes = append(r.routes, x)
	}
	for _, f := range r.fanOuts {
		f = f.withDefaults()
		logger := r.logger.With("queue", f.Queue, "sink", "fanout")
		x := &route{Route: Route{Queue: f.Queue, SinkKind: "fanout", Drainer: f.drainerConfig()}, state: "idle", logger: logger,
			fanOut: newFanOut(f, pool, logger)}
		dopts := []drainer.Option[json.RawMessage]{drainer.WithLogger[json.RawMessage](r.logger),
			drainer.WithTxApplier[json.RawMessage](x.fanOut.apply)}
		if r.registerer != nil {
			dopts = append(dopts, drainer.WithMetrics[json.RawMessage](r.registerer))
		}
		d, err := drainer.New(pool, x.Drainer, decodeRaw, nil, dopts...)
		if err != nil {
			return nil, fmt.Errorf("fan-out of queue %s: %w", f.Queue, err)
		}
		x.drainer = d
		r.routes = append(r.routes, x)
	}
	return r, nil
}

// decodeRaw keeps the payload as the jsonb text it is: the relay forwards it, it does not read it.
func decodeRaw(payload []byte) (json.RawMessage, error) {
	return bytes.Clone(payload), nil
}

// canonicalQueue is the queue name as the registry stores it, for duplicate detection.
func canonicalQueue(q string) string {
	q = strings.ToLower(q)
	if !strings.Contains(q, ".") {
		q = "public." + q
	}
	return q
}

// apply is the route's drainer.Applier: one event to the batcher, its Result to the drainer.
func (x *route) apply(ctx context.Context, eventType string, payload json.RawMessage) error {
	de, _ := drainer.EventFrom(ctx)
	headers := de.Headers
	if x.tracing {
		headers = drainer.InjectTraceContext(ctx, headers) // ctx holds the drainer's delivery span
	}
	e := Event{
		Queue:        de.Table,
		ID:           de.ID,
		Identity:     EventIdentity(de),
		Headers:      headers,
		Type:         eventType,
		PartitionKey: de.PartitionKey,
		Attempts:     de.Attempts,
		CreatedAt:    de.CreatedAt,
		Payload:      payload,
	}
	res := x.batcher.deliver(ctx, e)
	x.failures.observe(ctx, e, res)
	switch res.Outcome {
	case Sent:
		return nil
	case Permanent:
		return drainer.Permanent(cmpErr(res.Err, "the sink refused the event for good"))
	}
	err := cmpErr(res.Err, "the sink failed transiently")
	if res.RetryAfter > 0 {
		// The peer's wish replaces the queue's backoff. The time is taken on this clock once the
		// sink answered; the database stores it as given (apply_results' retry_at).
		return drainer.RetryAt(fmt.Errorf("%w (the peer asked to retry after %s)", err, res.RetryAfter), time.Now().Add(res.RetryAfter))
	}
	return err
}

func cmpErr(err error, fallback string) error {
	if err != nil {
		return err
	}
	return errors.New(fallback)
}

// Run relays every route until ctx is cancelled, then shuts down gracefully: each drainer stops
// claiming, gives back rows it has not started, lets deliveries in flight finish (up to its
// ApplyTimeout) and records them; then every sink is closed (a producer flushes). A drainer that
// fails (its queue is not registered, a registration mismatch) stops the whole relay: Run
// returns its error, naming the queue, once the others have stopped the same way. Run returns
// nil after a clean shutdown.
func (r *Relay) Run(ctx context.Context) error {
	if !r.running.CompareAndSwap(false, true) {
		return ErrAlreadyRunning
	}
	defer r.running.Store(false)
	shutdown := ctx
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errs := make([]error, len(r.routes))
	var wg sync.WaitGroup
	for i, x := range r.routes {
		wg.Go(func() {
			x.setState("running", nil)
			x.logger.InfoContext(ctx, "relaying", "mode", x.Drainer.ClaimMode.String())
			// A drainer still starting (waiting for the database) when the relay is told to stop
			// returns its last start error: that is a clean shutdown, not a failure.
			if err := x.drainer.Run(ctx); err != nil && shutdown.Err() == nil {
				x.setState("failed", err)
				errs[i] = fmt.Errorf("queue %s: %w%s", x.Queue, err, r.sinkQueueHint(x, err))
				x.logger.ErrorContext(ctx, "relay of the queue failed; stopping the relay", "err", err)
				r.stopping.Store(true)
				cancel()
				return
			}
			x.setState("stopped", nil)
		})
	}
	<-ctx.Done()
	r.stopping.Store(true)
	wg.Wait()
	for _, x := range r.routes {
		if x.fanOut != nil {
			continue
		}
		x.batcher.close()
		if err := x.Sink.Close(); err != nil {
			errs = append(errs, fmt.Errorf("queue %s: closing sink %s: %w", x.Queue, x.SinkKind, err))
		}
	}
	return errors.Join(errs...)
}

// sinkQueueHint says how to make the missing queue of a fan-out's sink.
func (r *Relay) sinkQueueHint(x *route, err error) string {
	if x.fanOut != nil || !errors.Is(err, drainer.ErrQueueNotRegistered) {
		return ""
	}
	for _, f := range r.fanOuts {
		prefix := canonicalQueue(f.Queue) + FanOutSeparator
		if sink, ok := strings.CutPrefix(canonicalQueue(x.Queue), prefix); ok && fanOutSinkPattern.MatchString(sink) {
			return fmt.Sprintf(" (it is the queue of sink %s of %s: create it with pgdrain fanout add %s %s)",
				sink, canonicalQueue(f.Queue), canonicalQueue(f.Queue), sink)
		}
	}
	return ""
}

func (x *route) setState(state string, err error) {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.state, x.err = state, err
}
