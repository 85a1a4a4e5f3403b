package kafka_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/pgdrain/pgdrain/relay"
	"github.com/pgdrain/pgdrain/relay/kafka"
)

// cluster is an in-process Kafka (franz-go's kfake, which speaks the real protocol) with topics
// of 3 partitions.
func cluster(t *testing.T, topics ...string) *kfake.Cluster {
	t.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(3, topics...))
	require.NoError(t, err)
	t.Cleanup(c.Close)
	return c
}

// identityPrefix starts every test event's identity: an event_id (a uuid) the test can read.
const identityPrefix = "0f0e0d0c-0000-4000-8000-"

// identity is the event_id of test event id.
func identity(id int64) string { return fmt.Sprintf("%s%012d", identityPrefix, id) }

func event(id int64, key, typ, payload string) relay.Event {
	return relay.Event{Queue: "public.orders", ID: id, Identity: identity(id), Type: typ,
		PartitionKey: key, CreatedAt: time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC), Payload: json.RawMessage(payload)}
}

func deliver(t *testing.T, s *kafka.Sink, events ...relay.Event) []relay.Result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return s.Deliver(ctx, events)
}

// consume reads n records of topic from the start.
func consume(t *testing.T, c *kfake.Cluster, topic string, n int) []*kgo.Record {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	require.NoError(t, err)
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var out []*kgo.Record
	for len(out) < n {
		fs := cl.PollFetches(ctx)
		require.NoError(t, ctx.Err(), "got %d of %d records", len(out), n)
		fs.EachRecord(func(r *kgo.Record) { out = append(out, r) })
	}
	require.Len(t, out, n)
	return out
}

func header(r *kgo.Record, key string) string {
	for _, h := range r.Headers {
		if h.Key == key {
			return string(h.Value)
		}
	}
	return ""
}

// Each key's events, delivered one batch after another as the relay does, land on one partition
// in order, keyed by the partition key, with CloudEvents headers carrying the identity.
func TestSink_KeyIsThePartitionKeyAndOrderHolds(t *testing.T) {
	t.Parallel()
	c := cluster(t, "orders")
	s, err := kafka.New(kafka.Config{Brokers: c.ListenAddrs(), Topic: "orders"})
	require.NoError(t, err)
	keys := []string{"alice", "bob", "carol", "dave"}
	id := int64(0)
	for seq := range 5 {
		var batch []relay.Event
		for _, k := range keys {
			id++
			batch = append(batch, event(id, k, "order.updated", fmt.Sprintf(`{"key":%q,"seq":%d}`, k, seq)))
		}
		for _, r := range deliver(t, s, batch...) {
			require.Equal(t, relay.SentResult(), r)
		}
	}
	require.NoError(t, s.Close())

	partitionOf := map[string]int32{}
	next := map[string]int{}
	for _, r := range consume(t, c, "orders", 20) {
		var p struct {
			Key string `json:"key"`
			Seq int    `json:"seq"`
		}
		require.NoError(t, json.Unmarshal(r.Value, &p))
		require.Equal(t, p.Key, string(r.Key))
		if part, seen := partitionOf[p.Key]; seen {
			require.Equal(t, part, r.Partition, "key %s moved partitions", p.Key)
		}
		partitionOf[p.Key] = r.Partition
		require.Equal(t, next[p.Key], p.Seq, "key %s out of order", p.Key)
		next[p.Key]++
		require.Equal(t, "1.0", header(r, "ce_specversion"))
		require.True(t, strings.HasPrefix(header(r, "ce_id"), identityPrefix))
		require.Equal(t, "/pgdrain/public.orders", header(r, "ce_source"))
		require.Equal(t, "order.updated", header(r, "ce_type"))
		require.Equal(t, "2026-11-30T12:00:00Z", header(r, "ce_time"))
	}
	for _, k := range keys {
		require.Equal(t, 5, next[k])
	}
}

// TopicField routes each event by its payload; a payload without the field or with a name Kafka
// forbids is permanent, and does not hold up the rest of the batch.
func TestSink_TopicFromThePayload(t *testing.T) {
	t.Parallel()
	c := cluster(t, "eu.orders", "us.orders")
	s, err := kafka.New(kafka.Config{Brokers: c.ListenAddrs(), TopicField: "region_topic"})
	require.NoError(t, err)
	defer s.Close()
	res := deliver(t, s,
		event(1, "a", "t", `{"region_topic":"eu.orders"}`),
		event(2, "b", "t", `{"region_topic":"us.orders"}`),
		event(3, "c", "t", `{"other":1}`),
		event(4, "d", "t", `{"region_topic":"no spaces allowed"}`),
		event(5, "e", "t", `[1,2]`),
	)
	require.Equal(t, relay.Sent, res[0].Outcome)
	require.Equal(t, relay.Sent, res[1].Outcome)
	require.Equal(t, relay.Permanent, res[2].Outcome)
	require.EqualError(t, res[2].Err, `the payload has no string field "region_topic" to take the topic from`)
	require.Equal(t, relay.Permanent, res[3].Outcome)
	require.Equal(t, relay.Permanent, res[4].Outcome)
	require.Equal(t, identity(1), header(consume(t, c, "eu.orders", 1)[0], "ce_id"))
	require.Equal(t, identity(2), header(consume(t, c, "us.orders", 1)[0], "ce_id"))
}

// A payload names no internal topic (a leading "_": Schema Registry's _schemas, the brokers'
// __consumer_offsets) unless allowed_topics lists it exactly, and with allowed_topics only the
// topics it allows: a refused topic is permanent and nothing is produced there.
func TestSink_PayloadsNameOnlyAllowedTopics(t *testing.T) {
	t.Parallel()
	c := cluster(t, "eu.orders", "us.orders", "_schemas", "audit")
	open := func(allowed ...string) *kafka.Sink {
		s, err := kafka.New(kafka.Config{Brokers: c.ListenAddrs(), TopicField: "t", AllowedTopics: allowed})
		require.NoError(t, err)
		t.Cleanup(func() { _ = s.Close() })
		return s
	}
	res := deliver(t, open(), event(1, "a", "t", `{"t":"_schemas"}`), event(2, "b", "t", `{"t":"audit"}`))
	require.Equal(t, relay.Permanent, res[0].Outcome)
	require.ErrorContains(t, res[0].Err, `names the internal topic "_schemas"`)
	require.Equal(t, relay.Sent, res[1].Outcome)

	res = deliver(t, open("eu.*", "_schemas"),
		event(3, "c", "t", `{"t":"eu.orders"}`), event(4, "d", "t", `{"t":"us.orders"}`), event(5, "e", "t", `{"t":"_schemas"}`))
	require.Equal(t, relay.Sent, res[0].Outcome)
	require.Equal(t, relay.Permanent, res[1].Outcome)
	require.EqualError(t, res[1].Err, `the payload's field "t" names the topic "us.orders", which allowed_topics (eu.*, _schemas) does not allow`)
	require.Equal(t, relay.Sent, res[2].Outcome, "an internal topic listed exactly")
	require.Len(t, consume(t, c, "_schemas", 1), 1, "only the allowed record reached _schemas")

	require.EqualError(t, kafka.Config{Brokers: []string{"x:1"}, Topic: "a", AllowedTopics: []string{"a"}}.Validate(),
		"AllowedTopics must be empty unless TopicField is set: they limit the topics payloads name")
	require.ErrorContains(t, kafka.Config{Brokers: []string{"x:1"}, TopicField: "t", AllowedTopics: []string{"no spaces*"}}.Validate(),
		`AllowedTopics[0] must be a Kafka topic name, or a prefix of one ending in "*", got "no spaces*"`)
}

// A record larger than a batch may be is permanent; a cluster that is not there is transient
// (the delivery's deadline ends it).
func TestSink_TooLargeIsPermanentNoBrokerIsTransient(t *testing.T) {
	t.Parallel()
	c := cluster(t, "orders")
	s, err := kafka.New(kafka.Config{Brokers: c.ListenAddrs(), Topic: "orders",
		Options: []kgo.Opt{kgo.ProducerBatchMaxBytes(1024)}})
	require.NoError(t, err)
	defer s.Close()
	big := fmt.Sprintf(`{"blob":%q}`, strings.Repeat("x", 4096))
	res := deliver(t, s, event(1, "a", "t", big), event(2, "b", "t", `{}`))
	require.Equal(t, relay.Permanent, res[0].Outcome, "%v", res[0].Err)
	require.Equal(t, relay.Sent, res[1].Outcome)

	gone, err := kafka.New(kafka.Config{Brokers: []string{"127.0.0.1:1"}, Topic: "orders"})
	require.NoError(t, err)
	defer gone.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	r := gone.Deliver(ctx, []relay.Event{event(1, "a", "t", `{}`)})[0]
	require.Equal(t, relay.Transient, r.Outcome, "%v", r.Err)
}

func TestConfig_Validate(t *testing.T) {
	t.Parallel()
	err := kafka.Config{Brokers: []string{""}, Topic: "a b", TopicField: "t"}.Validate()
	require.EqualError(t, err, "Brokers[0] must be host:port, got \"\"\n"+
		"Topic must be empty when TopicField is set: the topic comes from one place")
	require.EqualError(t, kafka.Config{}.Validate(), "Brokers must list at least one seed broker (host:port)\n"+
		"Topic must be set, or TopicField to take each event's topic from its payload")
	require.ErrorContains(t, kafka.Config{Brokers: []string{"x:1"}, Topic: "a b"}.Validate(), `Topic must be a Kafka topic name`)
}

// The event's headers become record headers, after the sink's own; ce_* and content-type stay
// the sink's (ce_id is the identity).
func TestSink_AddsTheEventsHeaders(t *testing.T) {
	t.Parallel()
	c := cluster(t, "orders")
	s, err := kafka.New(kafka.Config{Brokers: c.ListenAddrs(), Topic: "orders"})
	require.NoError(t, err)
	defer s.Close()
	e := event(1, "alice", "order.created", `{}`)
	e.Headers = map[string]string{"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
		"x-tenant": "acme", "ce_id": "forged", "CE_TYPE": "forged", "Content-Type": "text/plain"}
	require.Equal(t, relay.SentResult(), deliver(t, s, e)[0])
	r := consume(t, c, "orders", 1)[0]
	var keys []string
	for _, h := range r.Headers {
		keys = append(keys, h.Key)
	}
	require.Equal(t, []string{"ce_specversion", "ce_id", "ce_source", "ce_type", "ce_time", "content-type",
		"traceparent", "x-tenant"}, keys)
	require.Equal(t, identity(1), header(r, "ce_id"))
	require.Equal(t, "order.created", header(r, "ce_type"))
	require.Equal(t, "application/json", header(r, "content-type"))
	require.Equal(t, "acme", header(r, "x-tenant"))
}
