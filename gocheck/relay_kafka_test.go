package gocheck

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/pgdrain/pgdrain/drainer"
	"github.com/pgdrain/pgdrain/relay"
	"github.com/pgdrain/pgdrain/relay/kafka"
)

// Two relay replicas (as pgdrain_worker) produce a partitioned queue to an in-process Kafka
// (kfake) in batches: every event arrives, each key on one partition in commit order, and an
// event seen twice carries one identity.
func TestRelay_KafkaKeepsKeyOrderAcrossReplicas(t *testing.T) {
	t.Parallel()
	drEachMode(t, func(t *testing.T, mode drainer.ClaimMode) {
		c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(4, "events"))
		require.NoError(t, err)
		t.Cleanup(c.Close)
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
			sink, err := kafka.New(kafka.Config{Brokers: c.ListenAddrs(), Topic: "events"})
			require.NoError(t, err)
			rlStart(t, pool, []relay.Route{rlRoute(q, mode, sink, 8, 8)})
		}
		drWaitFor(t, 60*time.Second, "every event sent", func() bool { return q.sent(t) == 80 })

		cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.ConsumeTopics("events"),
			kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
		require.NoError(t, err)
		defer cl.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		var got []relay.Event
		partitionOf := map[string]int32{}
		distinct := map[string]bool{}
		for len(distinct) < 80 { // a duplicate (same identity) may come on top
			fs := cl.PollFetches(ctx)
			require.NoError(t, ctx.Err(), "consumed %d of 80 events", len(distinct))
			fs.EachRecord(func(r *kgo.Record) {
				if p, seen := partitionOf[string(r.Key)]; seen {
					require.Equal(t, p, r.Partition, "key %s on two partitions", r.Key)
				}
				partitionOf[string(r.Key)] = r.Partition
				var id string
				for _, h := range r.Headers {
					if h.Key == "ce_id" {
						id = string(h.Value)
					}
				}
				distinct[id] = true
				got = append(got, relay.Event{Identity: id, Payload: r.Value})
			})
		}
		rlRequireKeyOrder(t, got, func(e relay.Event) drEvent { return rlPayload(t, e) }, want)
	})
}
