// Package escalation drives pgdrain's alert escalation ladder (schema alr, seed 000) from Go.
//
// An alert escalates through the steps of a policy ("telegram @oncall now, sms after 5 minutes,
// the manager's webhook after 15"). Each tick an Engine takes a batch of due steps with
// alr.take_due_steps — every step leased for a short time with its own fencing token — and for
// each step, in order:
//
//  0. checks that a Notifier serves the step's channel; if none does, the step is not recorded: it
//     is given back with alr.release_step (the ladder does not advance; it stays leased while the
//     engine takes past it, so unserved steps never starve the others: Engine.RunOnce), logged
//     with the channel and counted, so a configuration error delays a page instead of losing it;
//  1. calls alr.apply_escalation(escalation_id, lease_token), which records the step (advances the
//     ladder) only if the token is still the one in the row, the ladder runs and the alert fires;
//  2. only when that returned true, delivers the step through the Notifier of its channel, with the
//     engine's per-step timeout, on a goroutine of its own: a Notifier that panics, ends its
//     goroutine or ignores its timeout costs only its step (a failed delivery), never the engine;
//  3. journals the delivery in alr.delivery_journal (one row per real delivery).
//
// "Record, then deliver" gives at most one delivery per step: a batch slower than its lease (one
// channel hangs) lets another engine retake the remaining steps with new tokens, and the late
// engine's apply_escalation then returns false and it delivers nothing. The outbox drainer does the
// opposite — deliver, then record — for at-least-once delivery of events; both share the idea that a
// lease is a deadline and the token is ownership.
//
// A crashed engine never holds a step longer than its lease (2 minutes by default): the next take
// after that gets it. An engine stopped through its context releases the steps it has not applied
// yet (alr.release_step), so they are taken again at once.
//
// Every SQL call is bounded by Config.DBTimeout, so a connection to a host that vanished without
// a reset is abandoned and the pool dials again. An unavailable database (a restart, a failover:
// the same errors the drainer waits for, internal/pgerr) is waited for with backoff, at start and
// while running, and logged at Warn with its cause; a misconfiguration (authentication,
// permissions) fails Run at once. See docs/failover.md.
//
// Engine.Handler serves /metrics and /healthz (Engine.Health). The pgdrain command runs an engine
// from a YAML file with signed webhook notifiers (pgdrain escalate --config FILE, package
// escalation/config, docs/escalate.md); the console (pgdrain web) shows an engine as running while a
// session whose application_name starts with ApplicationName is connected.
//
// The engine needs only the pgdrain_worker role: every statement it sends (queries.go) calls an alr
// function granted to it, and it reads and writes no table (docs/security.md).
package escalation
