// Package drainer drains a pgdrain outbox queue: it claims rows through the outbox SQL functions,
// applies each with your Applier (a webhook call, a write to another system) and records the
// result. Every correctness rule (fencing, per-partition order, backoff, poison) lives in SQL; this
// package only drives it, so a drainer in another language behaves the same.
//
// # Lease mode or lock mode
//
// ClaimLease (the default) leases rows with a per-row fencing token (outbox.claim_batch) in one
// short transaction; applies run outside any transaction and results count only while the token
// still matches (outbox.apply_results, one round trip per batch). Pick it for slow or unreliable
// peers: nothing stays open while the peer thinks, and a crashed drainer's rows come back when
// their lease ends. Each row is written twice.
//
// ClaimLock is seed 001's claim transaction: BEGIN; outbox.claim_locked; apply the batch;
// outbox.settle_locked; COMMIT. The row lock is the fence and each row is written once, which
// measured about 1.5–1.8× the throughput of lease mode, but a transaction and a pooled connection
// stay open for the whole batch (up to ApplyTimeout per sequential apply). Pick it for fast peers
// (milliseconds), with a modest BatchSize or ApplyConcurrency > 1.
//
// # Guarantees
//
// Delivery is at least once: make the Applier idempotent (EventFrom gives the row id as a key).
// An apply never outlives its lease: its ctx deadline is min(ApplyTimeout, lease end -
// LeaseMargin), and a result that still arrives late is refused by its token, counted
// (outbox_lease_lost_total) and logged at debug level, never retried from here. Order is given
// only per partition key (Config.PartitionColumn); without one, rows of the same key can apply in
// any order, so leave it empty only when the target converges under any order.
//
// # Errors
//
// An Applier error is transient (retried with backoff) unless wrapped with Permanent; a payload
// that does not decode and a panic in the Applier are permanent. Under the queue's default
// 'poison' policy a permanent failure poisons the row; on a partitioned queue a transient failure
// never does, so the partition waits for its peer (watch it with WithWedgeObserver and the
// outbox_oldest_pending_age_seconds gauge).
//
// # Configuration and the SQL registry
//
// Max attempts, backoff, the permanent policy, the partition column and the channel belong to the
// queue's registration (outbox.create_queue) and the SQL functions apply them: SQL wins. Leave them
// zero in Config to take the registered values; Run fails at start, naming the field, when a value
// you set disagrees with the registration.
//
// # Privileges and the repair pass
//
// The drainer only calls outbox functions granted to pgdrain_worker (outbox.queue_info for the
// registration, outbox.next_due for wake-ups, the claim and result functions, outbox.stats for
// the gauges): connect it as a login role that is a member of pgdrain_worker and nothing else.
//
// Every Config.RepairInterval (default 1m) it calls outbox.repair, which finds pending rows no
// claim can reach because derived state (partition heads, floors, parks) disagrees with the queue
// table, and fixes it; replicas take turns. Each fix is logged at Warn with the queue, partition
// key, cause, head id and detail, and counted in pgdrain_repairs_total{queue,cause}: a repair turns
// a bug into a bounded delay that someone sees, so report any increase.
//
// # Wake-ups and shutdown
//
// Run LISTENs on the queue's channel over a dedicated connection (application_name
// ListenerApplicationName(table)), reconnecting with backoff; polls every PollFallback anyway;
// claims again at once after a batch that found rows (always after a full one: more may wait; and
// a recorded head unblocks its partition's successor, which no NOTIFY announces); and wakes when the earliest backoff or lease of the
// queue ends. When Run's ctx is cancelled, applies in flight finish on a non-cancellable context
// bounded by ApplyTimeout and are recorded, claimed rows not yet started are released (lease
// mode) or left untouched by the COMMIT (lock mode), and Run returns nil.
package drainer
