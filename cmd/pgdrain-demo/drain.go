package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/pgdrain/pgdrain/drainer"
	"github.com/pgdrain/pgdrain/internal/lastscrape"
)

// webhook posts events to the peer. The Applier it makes is what a service would write: one HTTP
// call, 2xx = sent, 4xx = permanent (the peer will never take this event), anything else transient.
type webhook struct {
	client *http.Client
	url    string
}

func newWebhook(url string) *webhook {
	return &webhook{url: url, client: &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 128}}}
}

func (h *webhook) post(ctx context.Context, replica string, ev drainer.Event, payload json.RawMessage) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, h.url, bytes.NewReader(payload))
	if err != nil {
		return drainer.Permanent(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Event-Id", strconv.FormatInt(ev.ID, 10)) // the peer's idempotency key
	req.Header.Set("X-Event-Type", ev.Type)
	req.Header.Set("X-Replica", replica)
	resp, err := h.client.Do(req)
	if err != nil {
		return fmt.Errorf("posting event %d: %w", ev.ID, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	switch {
	case resp.StatusCode/100 == 2:
		return nil
	case resp.StatusCode/100 == 4 && resp.StatusCode != http.StatusRequestTimeout && resp.StatusCode != http.StatusTooManyRequests:
		return drainer.Permanent(fmt.Errorf("HTTP %d: %s", resp.StatusCode, bytes.TrimSpace(body)))
	default:
		return fmt.Errorf("HTTP %d: %s", resp.StatusCode, bytes.TrimSpace(body))
	}
}

// applier is the Applier of one replica.
func (h *webhook) applier(replica string) drainer.Applier[json.RawMessage] {
	return func(ctx context.Context, _ string, payload json.RawMessage) error {
		ev, _ := drainer.EventFrom(ctx)
		return h.post(ctx, replica, ev, payload)
	}
}

// rawJSON is the Decoder: the webhook forwards the payload as it is.
func rawJSON(b []byte) (json.RawMessage, error) { return json.RawMessage(b), nil }

// replica is one running drainer, as a separate process would run it: its own pool and metrics.
type replica struct {
	name    string
	metrics *lastscrape.Registry // keeps the counts after Run returns
}

// replicaConfig is the demo replicas' Config: 32 applies in flight per replica, a 2s apply
// timeout (lease 5s by default), and a 1s poll fallback next to LISTEN/NOTIFY.
func replicaConfig() drainer.Config {
	return drainer.Config{
		Table:            queueName,
		ApplyConcurrency: 32,
		ApplyTimeout:     2 * time.Second,
		PollFallback:     time.Second,
	}
}

// startReplicas runs n drainers until ctx ends; wait blocks until all have returned.
func startReplicas(ctx context.Context, dsn string, h *webhook, n int, logger *slog.Logger) (reps []*replica, wait func() error, err error) {
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		name := fmt.Sprintf("replica-%d", i+1)
		pool, err := newPool(ctx, dsn, 8)
		if err != nil {
			return nil, nil, fmt.Errorf("%s: connecting: %w", name, err)
		}
		reg := lastscrape.New()
		d, err := drainer.New(pool, replicaConfig(), rawJSON, h.applier(name),
			drainer.WithLogger[json.RawMessage](logger.With("replica", name)),
			drainer.WithMetrics[json.RawMessage](reg))
		if err != nil {
			pool.Close()
			return nil, nil, fmt.Errorf("%s: %w", name, err)
		}
		reps = append(reps, &replica{name: name, metrics: reg})
		wg.Go(func() {
			defer pool.Close()
			if err := d.Run(ctx); err != nil {
				errs[i] = fmt.Errorf("%s: %w", name, err)
			}
		})
	}
	return reps, func() error {
		wg.Wait()
		for _, err := range errs {
			if err != nil {
				return err
			}
		}
		return nil
	}, nil
}

// counter reads a counter (summed over its label sets that match want) from a registry.
func counter(reg prometheus.Gatherer, name string, want map[string]string) float64 {
	families, err := reg.Gather()
	if err != nil {
		return 0
	}
	var sum float64
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
	metrics:
		for _, m := range f.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			for k, v := range want {
				if labels[k] != v {
					continue metrics
				}
			}
			sum += m.GetCounter().GetValue()
		}
	}
	return sum
}
