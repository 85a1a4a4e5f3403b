// Package drainer drains a pgdrain outbox queue: it claims rows through the outbox SQL functions,
// applies each with your Applier (a webhook call, a write to another system) and records the
// result. Every correctness rule (fencing, per-partition order, backoff, poison) lives in SQL; this
// package only drives it, so a drainer in another language behaves the same.
//
// # Lease mode or lock mode
//
// ClaimLease (the default) leases rows with a per-row fencing token (outbox.claim_batch) in one
// short transaction; applies run outside any transaction and results count only while the token
// still matches (outbox.apply_results). It runs as a continuous pipeline, in the manner of River's
// producer: ApplyConcurrency apply slots, each taking the next claimed row as soon as it frees;
// more rows claimed whenever the drainer holds fewer than its claim size (BatchSize, or
// ApplyConcurrency when that is above 1) and none waits for a slot; results recorded as applies
// finish, batched (when a claim's worth is pending, after 10ms, at once when nothing else is
// running, and always by the earliest pending row's deadline, LeaseMargin before its lease ends).
// One slow apply holds only its own slot. A row that waited for a slot (or a whole claim that
// came back late) is given a full ApplyTimeout by extending its lease first (outbox.extend_lease;
// for a late claim, all its rows in one round trip). Pick lease mode for slow or unreliable peers: nothing
// stays open while the peer thinks, and a crashed drainer's rows come back when their lease ends.
// Each row is written twice.
//
// ClaimLock is seed 001's claim transaction: BEGIN; outbox.claim_locked; apply the batch;
// outbox.settle_locked; COMMIT. The row lock is the fence and each row is written once, which
// measured about 1.5–1.8× the throughput of lease mode, but a transaction and a pooled connection
// stay open for the whole batch, and the next batch waits for the slowest apply of this one.
// Config.LockTransactionTimeout bounds that transaction: each apply's deadline is at most
// LeaseMargin before the bound, and at that point what returned is settled and committed, while a
// row whose Applier ignores its context is left untouched (claimed and delivered again once that
// apply returns: it keeps its apply slot until then). Its
// default, and its minimum, gives every row of a batch its full ApplyTimeout. The claim transaction
// runs with idle_in_transaction_session_timeout set to that bound plus 2*LeaseMargin, whatever the
// role's setting: a shorter one does not end its batches, and the server frees the row locks of a
// batch whose drainer vanished (a partition) soon after the bound.
// Pick lock mode for fast peers (milliseconds), with a modest BatchSize or ApplyConcurrency > 1.
//
// # Guarantees
//
// Delivery is at least once: make the Applier idempotent (EventFrom gives the row id as a key).
// An apply never outlives its lease: its ctx deadline is min(ApplyTimeout, lease end -
// LeaseMargin), and a result that still arrives late is refused by its token, counted
// (pgdrain_outbox_lease_lost_total) and logged at debug level, never retried from here. A drainer
// never applies one row twice at the same time, in either mode and across Runs of one Drainer: a
// row it claims again while its previous apply still runs (the Applier ignored its context past
// the lease, the lock-mode batch's LockTransactionTimeout or Run's shutdown) waits for that apply
// to return (lease mode), or is left unsettled by the batch (lock mode); such an apply keeps its
// apply slot until it returns, and a lock-mode drainer whose every slot is so held claims nothing
// meanwhile. Order is
// given only per partition key (the queue's partition_column, chosen at outbox.create_queue);
// without one, rows of the same key can apply in any order, so leave it out only when the target
// converges under any order.
//
// # Errors
//
// An Applier error is transient (retried with backoff) unless wrapped with Permanent; a payload
// that does not decode and a panic in the Applier are permanent, and so are an error whose own
// methods panic when the drainer reads it (a nil pointer of an error type returned as an error)
// and an Applier that calls runtime.Goexit (t.FailNow): each Applier call runs on a goroutine of
// its own, so nothing it does ends the drainer's. Under the queue's default
// 'poison' policy a permanent failure poisons the row; on a partitioned queue a transient failure
// never does, so the partition waits for its peer (watch it with WithWedgeObserver and the
// pgdrain_outbox_oldest_pending_age_seconds gauge).
//
// The error's text becomes the row's last_error, made recordable whatever it holds (a peer's
// words, often): valid UTF-8 (invalid bytes and NUL bytes become U+FFFD), at most 4000 bytes, cut
// at a character boundary. Should PostgreSQL still refuse a batch of results with a data exception
// (SQLSTATE class 22: a character the database's encoding lacks, a RetryAt time out of its range),
// the drainer records the batch row by row, a refused result with its text escaped to ASCII and
// the queue's backoff, and logs it: one bad result never costs the others their record. Log lines
// carry at most the first 1000 bytes of an error (errtext.LogBytes).
//
// Database errors never stop Run once it is draining: they are logged and retried with backoff
// (a pool closed under Run is not a database error: Run returns one matching ErrPoolClosed).
// Those that mean no writable database is reachable now (a restart, a failover, a DSN that reaches
// a standby, a primary whose default_transaction_read_only is on: connection errors, SQLSTATE
// 57P01, 57P02, 57P03, 57P05, 25006) are logged at Warn and are waited out at start too; rows in flight
// are then delivered again (at least once). Drainer.Health says when a claim last succeeded and
// why the last claim or result flush failed, for a health check that a ping alone would mislead. A
// write refused as read only (25006) is logged once per streak with what the server says of itself
// (a standby, or the setting and where it was set), and has the pool replace its connections, since
// a session keeps the default_transaction_read_only it began with. Connect with every host in the
// DSN and target_session_attrs=read-write, or through an address that follows the primary: see
// docs/failover.md.
//
// # Configuration and the SQL registry
//
// Every Config field configures the drainer, except the Expect fields. Max attempts, backoff, the
// permanent policy, the partition column and the channel belong to the queue's registration
// (outbox.create_queue, which pgdrain_worker may not call) and the SQL functions apply them. The
// ExpectMaxAttempts, ExpectBackoffMin, ExpectBackoffMax, ExpectPermanentPolicy,
// ExpectPartitionColumn and ExpectChannel fields are optional checks of that registration: zero
// accepts whatever is registered; a set value that disagrees makes Run fail at start with an error
// matching ErrRegistrationMismatch that names each field. Validate (run by New too) reports every
// problem of a Config at once, one per line, each line starting with the field name.
//
// # Privileges and the repair pass
//
// The drainer only calls outbox functions granted to pgdrain_worker (outbox.queue_info for the
// registration, outbox.next_due for wake-ups, the claim and result functions, outbox.stats for
// the gauges): connect it as a login role that is a member of pgdrain_worker and nothing else.
//
// Every Config.RepairInterval (default 1m) it calls outbox.repair, which finds pending rows no
// claim can reach because derived state (partition heads, floors, parks) disagrees with the queue
// table, and fixes it; replicas take turns. A pass walks the keys with pending rows, so the next
// one waits until at least ten times the last one's duration after it. Each fix is logged at Warn
// with the queue, partition key, cause, head id and detail, and counted in
// pgdrain_repairs_total{queue,cause}: a repair turns a bug into a bounded delay that someone sees,
// so report any increase.
//
// # Wake-ups, LISTEN and shutdown
//
// The drainers of a process that share a pool share one LISTEN connection: it is acquired from the
// pool and hijacked, so it is made like every pooled connection (BeforeConnect, AfterConnect, the
// pool's runtime parameters: IAM tokens and session setup apply) and does not count against
// MaxConns. It LISTENs on the channels of the drainers running, adding and removing channels as
// they start and stop, and closes with the last one; when it dies it reconnects with backoff and
// wakes every drainer, since NOTIFYs sent meanwhile are lost. ListenerPID names its backend.
//
// On a queue that notifies 'when_waiting' (outbox.set_notify) producers send a NOTIFY only while a
// drainer waits for one: before it sleeps, a drainer marks itself waiting (outbox.drainer_waits)
// and claims once more; the NOTIFY that wakes it clears the mark (outbox.drainer_woke). While
// producers are committing it can not mark itself, and claims again after 10–200 ms instead of
// sleeping. On other queues the mark is 0 and the drainer asks again only after each sleep.
// A drainer that found rows within the last Config.BusyPoll (50ms) does not mark itself: it claims
// again after 1–10 ms. A NOTIFY serialises the commits of all transactions that send one (a lock
// held through each one's WAL flush), so producers beside busy drainers send none (issue 29).
//
// Behind a transaction pooler (PgBouncer's pool_mode=transaction) a LISTEN hears nothing: give the
// drainers a small direct pool for it with WithListenPool (they then share its one LISTEN
// connection), or set Config.PollOnly. Such a pool also needs default_query_exec_mode=exec in its
// connection string, since pgx's default statement cache relies on prepared statements a
// transaction pooler does not keep; docs/pgbouncer.md has the setup.
//
// # Failures of the database
//
// While the database is unavailable (a restart, a failover, a standby not yet promoted, a call that
// got no answer within its deadline) the drainer retries with backoff, at start too, and logs at
// Warn with the cause; other errors at start (authentication, permissions, an unregistered queue)
// fail Run. Every database call has a deadline (Config.ClaimTimeout for claims, next_due, result
// flushes and releases; the lease for extensions; LockTransactionTimeout for lock-mode settling), so
// a connection to a host that vanished without a reset is abandoned and the pool dials again. A
// lease-mode result flush that failed because the database was unavailable, on a passing conflict
// with other transactions (a deadlock, a serialization failure) or because the server cancelled it
// (its lock_timeout or statement_timeout, pg_cancel_backend) is retried while the results' leases
// last. docs/failover.md has the details.
//
// Besides NOTIFY, a drainer polls every PollFallback; claims again when there is room after a
// claim that found rows, and after recording results (a recorded head unblocks its partition's
// successor, which no NOTIFY announces); and wakes when the earliest backoff or lease of the queue
// ends. When Run's ctx is cancelled, claimed rows not yet started are released (lease mode) or left
// untouched by the COMMIT (lock mode), applies in flight finish on a non-cancellable context bounded
// by ApplyTimeout and are recorded, and Run returns nil: it waits at most ApplyTimeout for them, so
// an Applier that ignores its context does not hold shutdown (its result is dropped and its row is
// delivered again).
package drainer
