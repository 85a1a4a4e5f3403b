// Package jetstream is a relay.Sink that publishes each event to NATS JetStream with
// github.com/nats-io/nats.go: the Nats-Msg-Id header is the event identity, so the stream drops a
// redelivered event within its duplicate window (make that window longer than the queue's longest
// backoff, or rely on consumers deduping on the header), and every publish acknowledgement is
// awaited before the event counts as sent.
//
// The subject is Config.Subject, or the string in the payload's top-level field
// Config.SubjectField. The message's data is the payload; its headers are Nats-Msg-Id, Event-Type,
// Event-Source (/pgdrain/<queue>), Event-Time (the row's created_at, RFC 3339) and Content-Type
// application/json.
//
// A payload names only subjects the config allows (Config.AllowedSubjects; never a system subject,
// "$JS.API...", "$KV...", "$SYS...", "_INBOX...", unless a pattern names it literally), so a
// producer cannot make the relay call JetStream's API with its credentials.
//
// A payload without the subject field, a subject NATS refuses (empty tokens, spaces, wildcards),
// a subject the config does not allow, a payload's subject no stream captures, and a message above
// the server's max_payload are permanent; everything else (no server, a stream that refuses for its
// limits, a timeout) is transient, so a misconfigured server delays events without poisoning them.
// A stream missing for the configured Config.Subject is a server not set up: New refuses it when
// the server answers at start, and later its events wait (transient) with an error that says so.
// The connection reconnects for ever, and a server that is down at start is retried rather than
// failing the relay.
package jetstream
