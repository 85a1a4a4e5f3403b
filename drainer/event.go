package drainer

import (
	"context"
	"time"
)

// Event describes the row an Applier is applying. EventFrom reads it from the Applier's ctx, for
// idempotency keys and logs.
type Event struct {
	// Table is the queue ("schema.table").
	Table string
	// ID is the row's id, its position in delivery order. On a partitioned queue an id given out
	// before COMMIT may change at COMMIT (DESIGN.md, "Identity and order of an event"), and
	// requeue_poisoned moves a row to a new id: dedupe on EventID.
	ID int64
	// EventID is the event's stable identity (outbox column event_id, generated at insert unless the
	// producer gave one): the idempotency key a peer dedupes on across redeliveries.
	EventID string
	// Headers are the event's headers (outbox column headers, an object of strings; nil when none),
	// for the sink: HTTP headers, Kafka or NATS headers, a W3C traceparent.
	Headers map[string]string
	// Type is the row's event_type.
	Type string
	// PartitionKey is the row's partition key ("" on an unpartitioned queue).
	PartitionKey string
	// Attempts is how many failed attempts the row had before this one.
	Attempts int
	// CreatedAt is when the row was inserted (its created_at): zero when the row has none (an
	// adopted table's column may allow NULL); a time outside years 1 to 9999 ('infinity' and
	// '-infinity' too, which a producer may write) reads as the nearest of those bounds.
	CreatedAt time.Time
}

type eventKey struct{}

func withEvent(ctx context.Context, e Event) context.Context {
	return context.WithValue(ctx, eventKey{}, e)
}

// EventFrom returns the Event being applied, when ctx is (derived from) an Applier's ctx.
func EventFrom(ctx context.Context) (Event, bool) {
	e, ok := ctx.Value(eventKey{}).(Event)
	return e, ok
}
