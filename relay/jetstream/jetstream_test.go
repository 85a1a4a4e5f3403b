package jetstream_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	njs "github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/pgdrain/pgdrain/relay"
	"github.com/pgdrain/pgdrain/relay/jetstream"
)

// natsServer runs an embedded NATS server with JetStream and a stream EVENTS on events.>.
func natsServer(t *testing.T, maxPayload int32) (*server.Server, njs.JetStream) {
	t.Helper()
	opts := &server.Options{Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: t.TempDir(), NoLog: true, NoSigs: true,
		MaxPayload: maxPayload}
	s, err := server.NewServer(opts)
	require.NoError(t, err)
	go s.Start()
	require.True(t, s.ReadyForConnections(10*time.Second), "nats-server did not start")
	t.Cleanup(s.Shutdown)
	nc, err := nats.Connect(s.ClientURL())
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	js, err := njs.New(nc)
	require.NoError(t, err)
	_, err = js.CreateStream(context.Background(), njs.StreamConfig{Name: "EVENTS", Subjects: []string{"events.>"},
		Duplicates: time.Hour})
	require.NoError(t, err)
	return s, js
}

// identityPrefix starts every test event's identity: an event_id (a uuid) the test can read.
const identityPrefix = "0f0e0d0c-0000-4000-8000-"

// identity is the event_id of test event id.
func identity(id int64) string { return fmt.Sprintf("%s%012d", identityPrefix, id) }

func event(id int64, key, payload string) relay.Event {
	return relay.Event{Queue: "public.orders", ID: id, Identity: identity(id), Type: "order.updated",
		PartitionKey: key, CreatedAt: time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC), Payload: json.RawMessage(payload)}
}

func deliver(t *testing.T, s *jetstream.Sink, events ...relay.Event) []relay.Result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return s.Deliver(ctx, events)
}

// stored returns the stream's messages in stream order.
func stored(t *testing.T, js njs.JetStream) []njs.Msg {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := js.Stream(ctx, "EVENTS")
	require.NoError(t, err)
	info, err := st.Info(ctx)
	require.NoError(t, err)
	c, err := st.OrderedConsumer(ctx, njs.OrderedConsumerConfig{})
	require.NoError(t, err)
	var out []njs.Msg
	for uint64(len(out)) < info.State.Msgs {
		m, err := c.Next(njs.FetchMaxWait(5 * time.Second))
		require.NoError(t, err)
		out = append(out, m)
	}
	return out
}

// Every event is stored once with its identity as Nats-Msg-Id, even when delivered twice (a
// relay redelivers after a lost result): the stream's dedupe drops the second copy, and the
// second delivery still counts as sent.
func TestSink_PublishesWithTheIdentityAsMsgID(t *testing.T) {
	t.Parallel()
	srv, js := natsServer(t, 0)
	s, err := jetstream.New(jetstream.Config{URL: srv.ClientURL(), Subject: "events.orders"})
	require.NoError(t, err)
	defer s.Close()
	for seq := range 3 {
		var batch []relay.Event
		for k, key := range []string{"a", "b"} {
			batch = append(batch, event(int64(seq*2+k+1), key, fmt.Sprintf(`{"key":%q,"seq":%d}`, key, seq)))
		}
		for _, r := range deliver(t, s, batch...) {
			require.Equal(t, relay.SentResult(), r)
		}
	}
	require.Equal(t, relay.SentResult(), deliver(t, s, event(1, "a", `{"key":"a","seq":0}`))[0], "a duplicate is acknowledged")
	msgs := stored(t, js)
	require.Len(t, msgs, 6, "the duplicate was dropped by the stream")
	next := map[string]int{}
	for _, m := range msgs {
		var p struct {
			Key string `json:"key"`
			Seq int    `json:"seq"`
		}
		require.NoError(t, json.Unmarshal(m.Data(), &p))
		require.Equal(t, next[p.Key], p.Seq, "key %s out of order", p.Key)
		next[p.Key]++
		require.True(t, strings.HasPrefix(m.Headers().Get("Nats-Msg-Id"), identityPrefix))
		require.Equal(t, "order.updated", m.Headers().Get("Event-Type"))
		require.Equal(t, "/pgdrain/public.orders", m.Headers().Get("Event-Source"))
		require.Equal(t, "2026-11-30T12:00:00Z", m.Headers().Get("Event-Time"))
		require.Equal(t, "events.orders", m.Subject())
	}
}

// SubjectField routes by payload; a missing field or a wildcard subject is permanent; so is a
// subject no stream captures, told apart from other failures (the server would never store the
// event); a message above the server's max_payload is permanent.
func TestSink_SubjectsAndFailures(t *testing.T) {
	t.Parallel()
	srv, js := natsServer(t, 2048)
	s, err := jetstream.New(jetstream.Config{URL: srv.ClientURL(), SubjectField: "subject"})
	require.NoError(t, err)
	defer s.Close()
	big := fmt.Sprintf(`{"subject":"events.big","blob":%q}`, strings.Repeat("x", 4096))
	res := deliver(t, s,
		event(1, "a", `{"subject":"events.eu"}`),
		event(2, "b", `{"nope":1}`),
		event(3, "c", `{"subject":"events.*"}`),
		event(4, "d", `{"subject":"elsewhere.x"}`),
		event(5, "e", big),
	)
	require.Equal(t, relay.Sent, res[0].Outcome, "%v", res[0].Err)
	require.Equal(t, relay.Permanent, res[1].Outcome)
	require.EqualError(t, res[1].Err, `the payload has no string field "subject" to take the subject from`)
	require.Equal(t, relay.Permanent, res[2].Outcome)
	require.Equal(t, relay.Permanent, res[3].Outcome, "%v", res[3].Err)
	require.EqualError(t, res[3].Err, "publishing to elsewhere.x: no JetStream stream captures the subject, so the server "+
		"would never store the event (add the subject to a stream, then requeue the event)")
	require.Equal(t, relay.Permanent, res[4].Outcome, "%v", res[4].Err)
	msgs := stored(t, js)
	require.Len(t, msgs, 1)
	require.Equal(t, "events.eu", msgs[0].Subject())
}

// A payload cannot make the relay publish to a system subject ($JS.API..., $KV..., $SYS...,
// _INBOX...): the event is refused for good and nothing is published, so the stream a payload
// names for deletion is still there. allowed_subjects narrows the subjects further, and lets a
// system subject through only when a pattern names it literally.
func TestSink_RefusesSubjectsOutsideWhatTheConfigAllows(t *testing.T) {
	t.Parallel()
	srv, js := natsServer(t, 0)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := js.CreateKeyValue(ctx, njs.KeyValueConfig{Bucket: "settings"})
	require.NoError(t, err)
	s, err := jetstream.New(jetstream.Config{URL: srv.ClientURL(), SubjectField: "subject"})
	require.NoError(t, err)
	defer s.Close()
	system := []string{"$JS.API.STREAM.DELETE.EVENTS", "$JS.API.STREAM.PURGE.EVENTS", "$KV.settings.admin",
		"$SYS.REQ.SERVER.PING", "$O.files.x", "_INBOX.abc"}
	for i, subject := range system {
		res := deliver(t, s, event(int64(i+1), "k", fmt.Sprintf(`{"subject":%q}`, subject)))[0]
		require.Equal(t, relay.Permanent, res.Outcome, "%s: %v", subject, res.Err)
		require.EqualError(t, res.Err, fmt.Sprintf(`the payload's field "subject" names the system subject %q `+
			`(the server's or JetStream's API, or a request's reply): the relay never publishes there for a producer `+
			`unless allowed_subjects names it`, subject))
	}
	st, err := js.Stream(ctx, "EVENTS")
	require.NoError(t, err, "the stream a payload asked to delete is still there")
	info, err := st.Info(ctx)
	require.NoError(t, err)
	require.Zero(t, info.State.Msgs)
	kv, err := js.KeyValue(ctx, "settings")
	require.NoError(t, err)
	_, err = kv.Get(ctx, "admin")
	require.ErrorIs(t, err, njs.ErrKeyNotFound, "nothing was written to the bucket")

	narrow, err := jetstream.New(jetstream.Config{URL: srv.ClientURL(), SubjectField: "subject",
		AllowedSubjects: []string{"events.eu.>", "events.*.audit", "$KV.settings.>"}})
	require.NoError(t, err)
	defer narrow.Close()
	res := deliver(t, narrow,
		event(11, "a", `{"subject":"events.eu.created"}`),
		event(12, "b", `{"subject":"events.us.audit"}`),
		event(13, "c", `{"subject":"events.us.created"}`),
		event(14, "d", `{"subject":"$KV.settings.theme"}`),
		event(15, "e", `{"subject":"$JS.API.STREAM.DELETE.EVENTS"}`),
	)
	require.Equal(t, relay.Sent, res[0].Outcome, "%v", res[0].Err)
	require.Equal(t, relay.Sent, res[1].Outcome, "%v", res[1].Err)
	require.Equal(t, relay.Permanent, res[2].Outcome)
	require.EqualError(t, res[2].Err, `the payload's field "subject" names the subject "events.us.created", which `+
		`allowed_subjects (events.eu.>, events.*.audit, $KV.settings.>) does not allow`)
	require.Equal(t, relay.Sent, res[3].Outcome, "a pattern naming $KV literally lets it through: %v", res[3].Err)
	require.Equal(t, relay.Permanent, res[4].Outcome)
	entry, err := kv.Get(ctx, "theme")
	require.NoError(t, err)
	require.JSONEq(t, `{"subject":"$KV.settings.theme"}`, string(entry.Value()))
	require.Len(t, stored(t, js), 2)
}

// The configured Subject must be captured by a stream: New says so when the server answers at
// start, and a stream removed later makes the events wait, with an error that says why (not
// "no response from stream").
func TestSink_AMissingStreamIsToldApart(t *testing.T) {
	t.Parallel()
	srv, js := natsServer(t, 0)
	_, err := jetstream.New(jetstream.Config{URL: srv.ClientURL(), Subject: "nowhere.x"})
	require.EqualError(t, err, `no JetStream stream captures Subject "nowhere.x": add it to a stream first`)

	s, err := jetstream.New(jetstream.Config{URL: srv.ClientURL(), Subject: "events.x"})
	require.NoError(t, err)
	defer s.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	require.NoError(t, js.DeleteStream(ctx, "EVENTS"))
	res := deliver(t, s, event(1, "a", `{}`))[0]
	require.Equal(t, relay.Transient, res.Outcome)
	require.EqualError(t, res.Err, "publishing to events.x: no JetStream stream captures the subject: add it to a stream; "+
		"the events wait until one does")
}

// A server that is not there yet does not fail New; the publish is transient.
func TestSink_NoServerIsTransient(t *testing.T) {
	t.Parallel()
	s, err := jetstream.New(jetstream.Config{URL: "nats://127.0.0.1:1", Subject: "events.x"})
	require.NoError(t, err)
	defer s.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	r := s.Deliver(ctx, []relay.Event{event(1, "a", `{}`)})[0]
	require.Equal(t, relay.Transient, r.Outcome, "%v", r.Err)
}

func TestConfig_Validate(t *testing.T) {
	t.Parallel()
	require.EqualError(t, jetstream.Config{}.Validate(), "URL must be set to the NATS server (nats://host:4222)\n"+
		"Subject must be set, or SubjectField to take each event's subject from its payload")
	require.EqualError(t, jetstream.Config{URL: "nats://x", Subject: "a..b"}.Validate(),
		`Subject must be dot-separated non-empty tokens, got "a..b"`)
	require.EqualError(t, jetstream.Config{URL: "nats://x", Subject: "a.>"}.Validate(),
		`Subject must not hold a wildcard to publish to, got "a.>"`)
	require.EqualError(t, jetstream.Config{URL: "nats://x", Subject: "a", SubjectField: "s"}.Validate(),
		"Subject must be empty when SubjectField is set: the subject comes from one place")
	require.EqualError(t, jetstream.Config{URL: "nats://x", Subject: "a", AllowedSubjects: []string{"a"}}.Validate(),
		"AllowedSubjects must be empty unless SubjectField is set: they limit the subjects payloads name")
	require.EqualError(t, jetstream.Config{URL: "nats://x", SubjectField: "s",
		AllowedSubjects: []string{"a.>", "a..b", "a.>.b", "a.b*", "a b"}}.Validate(),
		`AllowedSubjects[1] must be dot-separated non-empty tokens, got "a..b"`+"\n"+
			`AllowedSubjects[2] may hold ">" only as its last token, got "a.>.b"`+"\n"+
			`AllowedSubjects[3] must hold a wildcard as a whole token ("a.*.c", "a.>"), got "a.b*"`+"\n"+
			`AllowedSubjects[4] must not hold whitespace, got "a b"`)
}

// The event's headers go with the message; Nats-* (JetStream's own: the identity, expectations,
// rollups) and the sink's headers stay the sink's.
func TestSink_AddsTheEventsHeaders(t *testing.T) {
	t.Parallel()
	srv, js := natsServer(t, 0)
	s, err := jetstream.New(jetstream.Config{URL: srv.ClientURL(), Subject: "events.orders"})
	require.NoError(t, err)
	defer s.Close()
	e := event(1, "a", `{}`)
	e.Headers = map[string]string{"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
		"X-Tenant": "acme", "Nats-Msg-Id": "forged", "nats-expected-last-sequence": "999",
		"Nats-Rollup": "all", "event-type": "forged", "Content-Type": "text/plain"}
	require.Equal(t, relay.SentResult(), deliver(t, s, e)[0], "an expected sequence from the producer would fail the publish")
	msgs := stored(t, js)
	require.Len(t, msgs, 1)
	h := msgs[0].Headers()
	require.Equal(t, "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", h.Get("traceparent"))
	require.Equal(t, "acme", h.Get("X-Tenant"))
	require.Equal(t, identity(1), h.Get("Nats-Msg-Id"))
	require.Equal(t, "order.updated", h.Get("Event-Type"))
	require.Equal(t, "application/json", h.Get("Content-Type"))
	require.Empty(t, h.Get("event-type"))
	require.Empty(t, h.Get("Nats-Rollup"))
}
