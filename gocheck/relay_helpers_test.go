package gocheck

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/pgdrain/pgdrain/drainer"
	"github.com/pgdrain/pgdrain/relay"
	"github.com/pgdrain/pgdrain/relay/webhook"
)

// rlSink is a relay.Sink that records what it is given and answers with decide (Sent when nil).
type rlSink struct {
	decide func(e relay.Event) relay.Result

	mu      sync.Mutex
	events  []relay.Event // every event handed to Deliver, in call order
	batches []int         // the size of each Deliver call
	closed  int
}

func (s *rlSink) Deliver(_ context.Context, events []relay.Event) []relay.Result {
	out := make([]relay.Result, len(events))
	for i, e := range events {
		out[i] = relay.SentResult()
		if s.decide != nil {
			out[i] = s.decide(e)
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.events = append(s.events, events...)
	s.batches = append(s.batches, len(events))
	return out
}

func (s *rlSink) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed++
	return nil
}

func (s *rlSink) snapshot() ([]relay.Event, []int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]relay.Event(nil), s.events...), append([]int(nil), s.batches...)
}

// rlStart runs a relay of routes on pool until the returned stop is called (or the test ends);
// stop returns Run's error.
func rlStart(t *testing.T, pool *pgxpool.Pool, routes []relay.Route) (r *relay.Relay, reg *prometheus.Registry, stop func() error) {
	t.Helper()
	reg = prometheus.NewRegistry()
	r, err := relay.New(pool, routes, relay.WithLogger(drLogger(t)), relay.WithMetrics(reg))
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	stop = sync.OnceValue(func() error {
		cancel()
		select {
		case err := <-done:
			return err
		case <-time.After(30 * time.Second):
			return errors.New("Run did not return within 30s of cancellation")
		}
	})
	t.Cleanup(func() { _ = stop() })
	return r, reg, stop
}

// rlWebhookRoute is a route relaying q in mode, with q's check config, to a webhook at url signed
// with rlSecret.
func rlWebhookRoute(t *testing.T, q *drQueue, mode drainer.ClaimMode, url string) relay.Route {
	t.Helper()
	sink, err := webhook.New(webhook.Config{URL: url, Secrets: []string{rlSecret}})
	require.NoError(t, err)
	route := relay.Route{Queue: q.table, Sink: sink, SinkKind: "webhook", Drainer: q.config(mode)}
	route.Drainer.Table = ""
	return route
}

// rlPayload decodes an event's payload as the drainer checks' drEvent.
func rlPayload(t *testing.T, e relay.Event) drEvent {
	t.Helper()
	var p drEvent
	require.NoError(t, json.Unmarshal(e.Payload, &p), "payload %s", e.Payload)
	return p
}

// rlRequireKeyOrder checks what a sink saw, in the order it saw it: per key, every delivery is
// of the same event as the one before (a retry or a duplicate, with the same identity) or of the
// key's next event, never of an earlier one; every event of want arrived (key -> how many, seq
// 0..n-1); and one event always came with one identity.
func rlRequireKeyOrder(t *testing.T, events []relay.Event, payload func(relay.Event) drEvent, want map[string]int) {
	t.Helper()
	last := map[string]int{}
	identity := map[string]string{}
	for _, e := range events {
		p := payload(e)
		k := fmt.Sprintf("%s/%d", p.Key, p.Seq)
		if id, seen := identity[k]; seen {
			require.Equal(t, id, e.Identity, "event %s delivered under two identities", k)
		}
		identity[k] = e.Identity
		prev, started := last[p.Key]
		if !started {
			prev = -1
		}
		require.Contains(t, []int{prev, prev + 1}, p.Seq, "key %s: seq %d delivered after seq %d", p.Key, p.Seq, prev)
		last[p.Key] = p.Seq
	}
	for key, n := range want {
		require.Equal(t, n-1, last[key], "key %s: the last event delivered", key)
	}
}

// rlEventIDs returns the event_id of every row of queue, by row id.
func rlEventIDs(t *testing.T, pool *pgxpool.Pool, queue string) map[int64]string {
	t.Helper()
	rows, err := pool.Query(context.Background(), fmt.Sprintf(`SELECT id, event_id::text FROM %s`, pgx.Identifier(strings.Split(queue, ".")).Sanitize()))
	require.NoError(t, err)
	out := map[int64]string{}
	var id int64
	var eventID string
	_, err = pgx.ForEachRow(rows, []any{&id, &eventID}, func() error {
		out[id] = eventID
		return nil
	})
	require.NoError(t, err)
	return out
}
