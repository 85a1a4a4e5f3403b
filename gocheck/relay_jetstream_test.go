package gocheck

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	njs "github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/pgdrain/pgdrain/drainer"
	"github.com/pgdrain/pgdrain/relay"
	"github.com/pgdrain/pgdrain/relay/jetstream"
)

// Two relay replicas (as pgdrain_worker) publish a partitioned queue to an embedded NATS
// JetStream server: every event is stored, once per Nats-Msg-Id, each key's events in commit
// order.
func TestRelay_JetStreamKeepsKeyOrderAcrossReplicas(t *testing.T) {
	t.Parallel()
	drEachMode(t, func(t *testing.T, mode drainer.ClaimMode) {
		srv, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: t.TempDir(),
			NoLog: true, NoSigs: true})
		require.NoError(t, err)
		go srv.Start()
		require.True(t, srv.ReadyForConnections(10*time.Second))
		t.Cleanup(srv.Shutdown)
		nc, err := nats.Connect(srv.ClientURL())
		require.NoError(t, err)
		t.Cleanup(nc.Close)
		js, err := njs.New(nc)
		require.NoError(t, err)
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		stream, err := js.CreateStream(ctx, njs.StreamConfig{Name: "EVENTS", Subjects: []string{"events"}, Duplicates: time.Hour})
		require.NoError(t, err)

		q := drNewQueue(t, drQueueOpts{partitionColumn: "partition_key"})
		want := map[string]int{}
		for seq := range 10 {
			for _, key := range []string{"a", "b", "c", "d", "e", "f", "g", "h"} {
				q.enqueue(t, key, "op", seq)
				want[key] = seq + 1
			}
		}
		pool := loginPool(t, q.db, "pgdrain_worker")
		for range 2 {
			sink, err := jetstream.New(jetstream.Config{URL: srv.ClientURL(), Subject: "events"})
			require.NoError(t, err)
			rlStart(t, pool, []relay.Route{rlRoute(q, mode, sink, 8, 8)})
		}
		drWaitFor(t, 60*time.Second, "every event sent", func() bool { return q.sent(t) == 80 })

		info, err := stream.Info(ctx)
		require.NoError(t, err)
		require.EqualValues(t, 80, info.State.Msgs, "one stored message per event")
		c, err := stream.OrderedConsumer(ctx, njs.OrderedConsumerConfig{})
		require.NoError(t, err)
		var got []relay.Event
		for range 80 {
			m, err := c.Next(njs.FetchMaxWait(5 * time.Second))
			require.NoError(t, err)
			got = append(got, relay.Event{Identity: m.Headers().Get("Nats-Msg-Id"), Payload: m.Data()})
		}
		rlRequireKeyOrder(t, got, func(e relay.Event) drEvent { return rlPayload(t, e) }, want)
	})
}
