// Package relay delivers outbox events to a Sink (a webhook, a Kafka topic, a NATS JetStream
// stream, or your own) without an Applier of your own: it runs the drainer package for each
// queue (either claim mode), groups the events in flight into batches, and records each event's
// Result (sent, transient, permanent) through the outbox SQL functions.
//
// Every rule of the drainer holds: per-key order (a key's next event is claimed only once the
// previous one is recorded, so a sink sees at most one event per key at a time and delivers a key's
// events in commit order), fencing (a delivery never outlives its lease; a late result is refused),
// backoff and poison. Delivery is at least once; every sink hands the peer Event.Identity
// (EventIdentity: the row's event_id, the same on every delivery) to dedupe on, and sends the
// row's headers with the event. A peer's Retry-After (Result.RetryAfter) becomes the row's next
// attempt.
//
// One queue can feed several sinks, each at its own pace (WithFanOut, FanOut): the relay copies
// each event, in its claim transaction, into one queue per sink (FanOutQueue, made by
// AddFanOutSink), and a Route delivers each of those queues. Producers write the queue only.
//
// The pgdrain command runs a Relay from a YAML file (pgdrain relay --config FILE, package
// relay/config); a Go program builds Routes itself and calls New and Run. Relay.Handler serves
// Prometheus metrics and a health endpoint.
package relay
