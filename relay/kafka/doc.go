// Package kafka is a relay.Sink that produces each event as a Kafka record with
// github.com/twmb/franz-go: the record key is the event's partition key, so Kafka's default
// partitioner puts a key's events on one partition, whose order is then pgdrain's per-key commit
// order (the queue hands out a key's next event only after the previous one is acknowledged and
// recorded). The producer is idempotent (franz-go's default, with acks from all in-sync
// replicas), and Deliver returns only once every record of its batch is acknowledged or has
// failed: a row is recorded as sent only after Kafka has it.
//
// The value is the payload; the headers follow the CloudEvents Kafka protocol binding (binary
// mode): ce_specversion 1.0, ce_id the event identity (what consumers dedupe on), ce_source
// /pgdrain/<queue>, ce_type the event type, ce_time the row's created_at, and content-type
// application/json.
//
// The topic is Config.Topic, or the string in the payload's top-level field Config.TopicField.
// A payload without that field, a topic name Kafka forbids, and a record larger than the broker
// takes are permanent; everything else (no broker, no leader, an unknown topic, a timeout) is
// transient, so a misconfigured cluster delays events without poisoning them.
package kafka
