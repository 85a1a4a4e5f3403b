package gocheck

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	njs "github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/pgdrain/pgdrain/cmd/pgdrain/cli"
	"github.com/pgdrain/pgdrain/relay"
	"github.com/pgdrain/pgdrain/relay/webhook"
)

// pgdrain relay with one queue and three sinks in its file (a verifying webhook, NATS JetStream,
// Kafka), two replicas, as pgdrain_worker and pgdrain_producer: the webhook answers 503 until
// JetStream and Kafka have every event, which they get meanwhile; then it recovers and gets every
// event too. Each sink gets every event under the source row's event_id, each key in commit order.
func TestRelayFanOut_OneQueueToAWebhookJetStreamAndKafka(t *testing.T) {
	t.Parallel()
	q := drNewQueue(t, drQueueOpts{partitionColumn: "partition_key"})
	keys := []string{"a", "b", "c", "d", "e", "f"}
	want := map[string]int{}
	for seq := range 10 {
		for _, k := range keys {
			q.enqueue(t, k, "op", seq)
			want[k] = seq + 1
		}
	}
	const total = 60
	for _, sink := range []string{"hooks", "stream", "kafka"} {
		r := runCLI(t, "--dsn", q.db.URL, "fanout", "add", q.table, sink)
		require.Equal(t, cli.ExitOK, r.code, r.stderr)
	}

	var up atomic.Bool
	var mu sync.Mutex
	var hooked []relay.Event
	peer := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if err := webhook.Verify([]string{rlSecret}, r.Header, body, time.Now(), webhook.DefaultTolerance); err != nil {
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		if !up.Load() {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		var envelope struct {
			Data json.RawMessage `json:"data"`
		}
		if json.Unmarshal(body, &envelope) != nil {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		mu.Lock()
		hooked = append(hooked, relay.Event{Identity: r.Header.Get("webhook-id"), Payload: envelope.Data})
		mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	}))
	defer peer.Close()

	ns, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: t.TempDir(), NoLog: true, NoSigs: true})
	require.NoError(t, err)
	go ns.Start()
	require.True(t, ns.ReadyForConnections(10*time.Second))
	t.Cleanup(ns.Shutdown)
	nc, err := nats.Connect(ns.ClientURL())
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	js, err := njs.New(nc)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	stream, err := js.CreateStream(ctx, njs.StreamConfig{Name: "EVENTS", Subjects: []string{"events"}, Duplicates: time.Hour})
	require.NoError(t, err)
	kc, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(4, "events"))
	require.NoError(t, err)
	t.Cleanup(kc.Close)

	path := rlWriteConfig(t, fmt.Sprintf(`dsn: %s
log: {level: warn}
queues:
  - queue: public.events
    fanout: {batch_size: 16, poll_fallback: 1m}
    sinks:
      - name: hooks
        concurrency: 4
        timeout: 1s
        sink:
          webhook: {url: %s, secrets: [%s]}
      - name: stream
        claim_mode: lock
        concurrency: 8
        batch_size: 8
        sink:
          jetstream: {url: %q, subject: events}
      - name: kafka
        concurrency: 8
        batch_size: 8
        sink:
          kafka: {brokers: [%q], topic: events}
`, foLoginURL(t, q.db), peer.URL, rlSecret, ns.ClientURL(), kc.ListenAddrs()[0]))
	runCtx, stopRelays := context.WithCancel(context.Background())
	defer stopRelays()
	done := make(chan int, 2)
	var errOut [2]strings.Builder
	for i := range 2 {
		go func() { done <- cli.Run(runCtx, []string{"relay", "--config", path}, io.Discard, &errOut[i]) }()
	}

	for _, sink := range []string{"stream", "kafka"} {
		drWaitFor(t, 60*time.Second, sink+" has every event while the webhook is down", func() bool {
			return foCount(t, q, relay.FanOutQueue(q.table, sink), true) == total
		})
	}
	require.Zero(t, foCount(t, q, "public.events__hooks", true), "the webhook is down")
	require.Positive(t, q.count(t, `SELECT count(*) FROM public.events__hooks WHERE attempt_count > 0`), "the webhook was tried")
	up.Store(true)
	drWaitFor(t, 60*time.Second, "the webhook catches up", func() bool {
		return foCount(t, q, "public.events__hooks", true) == total
	})
	stopRelays()
	for range 2 {
		select {
		case c := <-done:
			require.Equal(t, cli.ExitOK, c, "%s\n%s", errOut[0].String(), errOut[1].String())
		case <-time.After(30 * time.Second):
			t.Fatal("pgdrain relay did not stop within 30s of its context ending")
		}
	}

	source := foSourceIdentities(t, q)
	payload := func(e relay.Event) drEvent { return rlPayload(t, e) }
	mu.Lock()
	rlRequireKeyOrder(t, hooked, payload, want)
	foRequireIdentities(t, hooked, source)
	mu.Unlock()

	info, err := stream.Info(ctx)
	require.NoError(t, err)
	require.EqualValues(t, total, info.State.Msgs, "one stored message per event")
	oc, err := stream.OrderedConsumer(ctx, njs.OrderedConsumerConfig{})
	require.NoError(t, err)
	var streamed []relay.Event
	for range total {
		m, err := oc.Next(njs.FetchMaxWait(5 * time.Second))
		require.NoError(t, err)
		streamed = append(streamed, relay.Event{Identity: m.Headers().Get("Nats-Msg-Id"), Payload: m.Data()})
	}
	rlRequireKeyOrder(t, streamed, payload, want)
	foRequireIdentities(t, streamed, source)

	cl, err := kgo.NewClient(kgo.SeedBrokers(kc.ListenAddrs()...), kgo.ConsumeTopics("events"),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	require.NoError(t, err)
	defer cl.Close()
	var produced []relay.Event
	distinct := map[string]bool{}
	for len(distinct) < total {
		fs := cl.PollFetches(ctx)
		require.NoError(t, ctx.Err(), "consumed %d of %d events", len(distinct), total)
		fs.EachRecord(func(r *kgo.Record) {
			var id string
			for _, h := range r.Headers {
				if h.Key == "ce_id" {
					id = string(h.Value)
				}
			}
			distinct[id] = true
			produced = append(produced, relay.Event{Identity: id, Payload: r.Value})
		})
	}
	rlRequireKeyOrder(t, produced, payload, want)
	foRequireIdentities(t, produced, source)
}
