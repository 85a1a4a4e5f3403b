package relay

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/pgdrain/pgdrain/drainer"
)

// Event is one outbox row on its way to a sink.
type Event struct {
	// Queue is the queue ("schema.table").
	Queue string
	// ID is the row's id: its delivery position, which may change (requeue_poisoned moves a row to
	// a new id). Sinks dedupe on Identity, never on ID.
	ID int64
	// Identity is the event's stable identity, the key every sink dedupes on (the Standard
	// Webhooks webhook-id, the Kafka header ce_id, the Nats-Msg-Id). See EventIdentity.
	Identity string
	// Headers are the event's headers (the row's headers column, an object of strings; nil when
	// none), for the sink to send with the event: HTTP headers, Kafka record headers, NATS headers.
	// A sink never lets them override the headers it sets itself (its identity, signature and
	// content type). With tracing on (WithTracerProvider) they also carry the delivery span's
	// trace context (traceparent, tracestate).
	Headers map[string]string
	// Type is the row's event_type.
	Type string
	// PartitionKey is the row's partition key ("" on an unpartitioned queue): the Kafka record
	// key, so that Kafka's partition order is pgdrain's per-key order.
	PartitionKey string
	// Attempts is how many failed attempts the row had before this one.
	Attempts int
	// CreatedAt is when the row was inserted.
	CreatedAt time.Time
	// Payload is the row's payload, as stored (jsonb text).
	Payload json.RawMessage
}

// EventIdentity is the one place that says what an event's identity is: its event_id (DESIGN.md,
// "Identity and order of an event"), immutable from the producer's INSERT on, whatever happens to
// the row's id (renumbered at COMMIT, moved by requeue_poisoned). Every delivery of one event
// carries it, so it is what a peer dedupes on.
func EventIdentity(e drainer.Event) string {
	return e.EventID
}

// Outcome is what a delivery attempt of one event came to.
type Outcome int

const (
	// Sent: the peer has the event. The row is recorded as sent.
	Sent Outcome = iota
	// Transient: the peer may take the event later (5xx, timeout, no connection). The row is
	// retried with the queue's backoff; on a partitioned queue it never poisons.
	Transient
	// Permanent: the peer will never take this event (a 4xx, a payload it refuses). Under the
	// queue's default 'poison' policy the row is poisoned and its key's successors go ahead.
	Permanent
)

// String returns "sent", "transient" or "permanent", the outcome names of the SQL API.
func (o Outcome) String() string {
	switch o {
	case Sent:
		return "sent"
	case Transient:
		return "transient"
	case Permanent:
		return "permanent"
	}
	return fmt.Sprintf("Outcome(%d)", int(o))
}

// Result is the outcome of delivering one event.
type Result struct {
	Outcome Outcome
	// Err says why the event was not sent (stored as the row's last_error). Ignored when Sent.
	Err error
	// RetryAfter, when positive on a Transient result, is when the peer asked to be tried again
	// (an HTTP Retry-After), from the moment Deliver returned: the row's next attempt is then, not
	// after the queue's backoff (drainer.RetryAt, recorded fenced like every result). The relay
	// counts these results (pgdrain_relay_retry_after_total).
	RetryAfter time.Duration
}

// SentResult is the Result of a delivered event.
func SentResult() Result { return Result{Outcome: Sent} }

// TransientResult is the Result of an attempt that may succeed later.
func TransientResult(err error) Result { return Result{Outcome: Transient, Err: err} }

// PermanentResult is the Result of an event the peer will never take.
func PermanentResult(err error) Result { return Result{Outcome: Permanent, Err: err} }

// Sink delivers events to a peer. Implement it to relay to anything; pgdrain ships webhook,
// Kafka and NATS JetStream sinks (packages relay/webhook, relay/kafka, relay/jetstream).
//
// Deliver is called with up to the route's BatchSize events, at most one per partition key (the
// queue hands out a key's next event only after the previous one is recorded), possibly from
// several goroutines at once (up to the route's Concurrency events are in flight). It returns
// one Result per event, in the order of events; it must be done by ctx's deadline (a result that
// comes later is dropped and the event delivered again). Delivery is at least once: give the
// peer Event.Identity to dedupe on.
type Sink interface {
	Deliver(ctx context.Context, events []Event) []Result
	// Close releases the sink's connections once no Deliver runs any more (after a flush, for a
	// producer that buffers).
	Close() error
}
