package kafka

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/pgdrain/pgdrain/relay"
)

// DefaultClientID is the client id the producer announces.
const DefaultClientID = "pgdrain-relay"

// closeFlushTimeout bounds the flush of records still buffered when the sink closes.
const closeFlushTimeout = 10 * time.Second

// topicPattern is what Kafka accepts as a topic name.
var topicPattern = regexp.MustCompile(`^[a-zA-Z0-9._-]{1,249}$`)

// Config configures a Kafka Sink.
type Config struct {
	// Brokers are the seed brokers, host:port. At least one.
	Brokers []string `yaml:"brokers"`
	// Topic receives every event. Set it or TopicField.
	Topic string `yaml:"topic"`
	// TopicField names the payload's top-level string field that holds each event's topic. Set it
	// or Topic.
	TopicField string `yaml:"topic_field"`
	// AllowedTopics limits the topics TopicField may name: exact names, or prefixes ending in "*"
	// ("orders.*"). Empty: every topic but internal ones, whose name starts with "_"
	// (__consumer_offsets, __transaction_state, _schemas, ...): a payload names one of those only
	// when AllowedTopics lists it exactly. A refused topic is permanent.
	AllowedTopics []string `yaml:"allowed_topics"`
	// ClientID is the producer's client id. Defaults to "pgdrain-relay" (DefaultClientID).
	ClientID string `yaml:"client_id"`
	// Options are more franz-go options (TLS, SASL, compression), after the sink's own. They may
	// not turn off idempotent writes.
	Options []kgo.Opt `yaml:"-"`
}

// Validate reports every problem of c, one line each, each starting with the field name.
func (c Config) Validate() error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if len(c.Brokers) == 0 {
		bad("Brokers must list at least one seed broker (host:port)")
	}
	for i, b := range c.Brokers {
		if b == "" {
			bad("Brokers[%d] must be host:port, got %q", i, b)
		}
	}
	switch {
	case c.Topic == "" && c.TopicField == "":
		bad("Topic must be set, or TopicField to take each event's topic from its payload")
	case c.Topic != "" && c.TopicField != "":
		bad("Topic must be empty when TopicField is set: the topic comes from one place")
	case c.Topic != "" && !topicPattern.MatchString(c.Topic):
		bad("Topic must be a Kafka topic name (letters, digits, '.', '_', '-', at most 249), got %q", c.Topic)
	}
	if len(c.AllowedTopics) > 0 && c.TopicField == "" {
		bad("AllowedTopics must be empty unless TopicField is set: they limit the topics payloads name")
	}
	for i, a := range c.AllowedTopics {
		if name := strings.TrimSuffix(a, "*"); !topicPattern.MatchString(name) {
			bad("AllowedTopics[%d] must be a Kafka topic name, or a prefix of one ending in \"*\", got %q", i, a)
		}
	}
	return errors.Join(errs...)
}

// Sink produces events to Kafka. It is safe for concurrent use.
type Sink struct {
	cfg    Config
	client *kgo.Client
}

var _ relay.Sink = (*Sink)(nil)

// New returns a Sink for cfg. The client connects lazily: an unreachable cluster shows up as
// transient results, not here.
func New(cfg Config) (*Sink, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	opts := []kgo.Opt{
		kgo.SeedBrokers(cfg.Brokers...),
		kgo.ClientID(cmpOr(cfg.ClientID, DefaultClientID)),
		kgo.RequiredAcks(kgo.AllISRAcks()), // what idempotence needs; also franz-go's default
	}
	client, err := kgo.NewClient(append(opts, cfg.Options...)...)
	if err != nil {
		return nil, fmt.Errorf("creating the Kafka client: %w", err)
	}
	return &Sink{cfg: cfg, client: client}, nil
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// Deliver produces the batch and waits until Kafka acknowledged or refused every record.
func (s *Sink) Deliver(ctx context.Context, events []relay.Event) []relay.Result {
	out := make([]relay.Result, len(events))
	records := make([]*kgo.Record, 0, len(events))
	index := make(map[*kgo.Record]int, len(events))
	for i, e := range events {
		r, err := s.record(e)
		if err != nil {
			out[i] = relay.PermanentResult(err)
			continue
		}
		records = append(records, r)
		index[r] = i
	}
	if len(records) == 0 {
		return out
	}
	// Results come back in completion order, each with its record.
	for _, res := range s.client.ProduceSync(ctx, records...) {
		i := index[res.Record]
		out[i] = classify(res.Err, res.Record.Topic)
	}
	return out
}

// record builds the event's Kafka record.
func (s *Sink) record(e relay.Event) (*kgo.Record, error) {
	topic := s.cfg.Topic
	if s.cfg.TopicField != "" {
		var fields map[string]json.RawMessage
		if err := json.Unmarshal(e.Payload, &fields); err != nil {
			return nil, fmt.Errorf("reading topic field %q: the payload is not a JSON object", s.cfg.TopicField)
		}
		raw, ok := fields[s.cfg.TopicField]
		if !ok || json.Unmarshal(raw, &topic) != nil {
			return nil, fmt.Errorf("the payload has no string field %q to take the topic from", s.cfg.TopicField)
		}
		if !topicPattern.MatchString(topic) {
			return nil, fmt.Errorf("the payload's field %q is not a Kafka topic name: %q", s.cfg.TopicField, topic)
		}
		if !topicAllowed(topic, s.cfg.AllowedTopics) {
			if len(s.cfg.AllowedTopics) == 0 {
				return nil, fmt.Errorf("the payload's field %q names the internal topic %q (its name starts with \"_\"): "+
					"the relay never produces there for a producer unless allowed_topics names it", s.cfg.TopicField, topic)
			}
			return nil, fmt.Errorf("the payload's field %q names the topic %q, which allowed_topics (%s) does not allow",
				s.cfg.TopicField, topic, strings.Join(s.cfg.AllowedTopics, ", "))
		}
	}
	r := &kgo.Record{
		Topic: topic,
		Value: e.Payload,
		Headers: []kgo.RecordHeader{
			{Key: "ce_specversion", Value: []byte("1.0")},
			{Key: "ce_id", Value: []byte(e.Identity)},
			{Key: "ce_source", Value: []byte("/pgdrain/" + e.Queue)},
			{Key: "ce_type", Value: []byte(e.Type)},
			{Key: "ce_time", Value: []byte(e.CreatedAt.UTC().Format(time.RFC3339Nano))},
			{Key: "content-type", Value: []byte("application/json")},
		},
	}
	r.Headers = appendEventHeaders(r.Headers, e.Headers)
	if e.PartitionKey != "" {
		r.Key = []byte(e.PartitionKey)
	}
	return r, nil
}

// appendEventHeaders adds the event's headers, in name order (so one event's records are
// alike), except those the sink sets: ce_* (CloudEvents attributes, ce_id the identity) and
// content-type.
func appendEventHeaders(out []kgo.RecordHeader, headers map[string]string) []kgo.RecordHeader {
	for _, name := range slices.Sorted(maps.Keys(headers)) {
		lower := strings.ToLower(name)
		if strings.HasPrefix(lower, "ce_") || lower == "content-type" {
			continue
		}
		out = append(out, kgo.RecordHeader{Key: name, Value: []byte(headers[name])})
	}
	return out
}

// permanentErrors are refusals that no retry changes: the record itself is wrong.
var permanentErrors = []error{
	kerr.MessageTooLarge, kerr.RecordListTooLarge, kerr.InvalidRecord, kerr.CorruptMessage,
	kerr.InvalidTopicException, kerr.InvalidRequiredAcks,
}

func classify(err error, topic string) relay.Result {
	if err == nil {
		return relay.SentResult()
	}
	err = fmt.Errorf("producing to %s: %w", topic, err)
	for _, p := range permanentErrors {
		if errors.Is(err, p) {
			return relay.PermanentResult(err)
		}
	}
	return relay.TransientResult(err)
}

// Close flushes what is still buffered (bounded) and closes the client.
func (s *Sink) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), closeFlushTimeout)
	defer cancel()
	err := s.client.Flush(ctx)
	s.client.Close()
	if err != nil {
		return fmt.Errorf("flushing the Kafka producer: %w", err)
	}
	return nil
}

// topicAllowed reports whether a payload may name topic: with no allowed list, any topic not
// internal (a leading "_"); else one the list names exactly, or one under a prefix of it ending in
// "*" (never an internal one, which only an exact name allows).
func topicAllowed(topic string, allowed []string) bool {
	internal := strings.HasPrefix(topic, "_")
	if len(allowed) == 0 {
		return !internal
	}
	for _, a := range allowed {
		if prefix, ok := strings.CutSuffix(a, "*"); ok {
			if !internal && strings.HasPrefix(topic, prefix) {
				return true
			}
		} else if topic == a {
			return true
		}
	}
	return false
}
