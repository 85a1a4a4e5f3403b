package drainer

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"regexp"
	"strings"
	"time"

	"github.com/pgdrain/pgdrain/internal/sqlrule"
)

// Defaults and limits of Config. A zero field takes its default.
const (
	// DefaultBatchSize is how many rows one claim takes when ApplyConcurrency is 1.
	DefaultBatchSize = 32
	// MaxBatchSize is the largest claim the SQL functions accept.
	MaxBatchSize = 10000
	// DefaultPollFallback is how often the drainer claims even when no NOTIFY arrived.
	DefaultPollFallback = 30 * time.Second
	// MinPollFallback is the shortest PollFallback Validate accepts: the drainer never schedules
	// its own wake-ups closer together (an idle drainer polling every nanosecond made thousands
	// of claims a second).
	MinPollFallback = minWakeDelay
	// MinClaimTimeout is the shortest ClaimTimeout Validate accepts: below it no claim, ping or
	// registration read can answer in time, and every attempt looks like a dead connection.
	MinClaimTimeout = 100 * time.Millisecond
	// MinWedgeWarnAfter is the shortest positive WedgeWarnAfter Validate accepts: each report
	// reads the queue's oldest partitions (outbox.wedged_partitions).
	MinWedgeWarnAfter = 100 * time.Millisecond
	// DefaultMaxAttempts is the poison mark of a queue created with outbox.create_queue's defaults
	// (max_attempts): the seed's 10.
	DefaultMaxAttempts = 10
	// MaxMaxAttempts is the largest max_attempts outbox.create_queue accepts.
	MaxMaxAttempts = 1000
	// DefaultBackoffMin is the shortest retry delay of a queue created with outbox.create_queue's
	// defaults (backoff_min): the seed's 1s.
	DefaultBackoffMin = time.Second
	// DefaultBackoffMax is the longest retry delay of a queue created with outbox.create_queue's
	// defaults (backoff_max): the seed's 30s.
	DefaultBackoffMax = 30 * time.Second
	// DefaultApplyTimeout bounds one Applier call.
	DefaultApplyTimeout = 5 * time.Second
	// DefaultApplyConcurrency applies one row at a time.
	DefaultApplyConcurrency = 1
	// DefaultRunLength takes one row per partition per claim (the seed's claim).
	DefaultRunLength = 1
	// MaxRunLength is the longest run the SQL functions accept.
	MaxRunLength = 1000
	// DefaultRepairInterval is how often the repair pass runs (outbox.repair).
	DefaultRepairInterval = time.Minute
	// DefaultBusyPoll is how long a drainer that just found rows polls before it asks producers
	// to NOTIFY it (Config.BusyPoll).
	DefaultBusyPoll = 50 * time.Millisecond
	// MaxBusyPoll is the longest BusyPoll Validate accepts.
	MaxBusyPoll = 10 * time.Second
	// DefaultTrickleInterval is the least time between claims while rows trickle in
	// (Config.TrickleInterval).
	DefaultTrickleInterval = 20 * time.Millisecond
	// MaxTrickleInterval is the longest TrickleInterval Validate accepts.
	MaxTrickleInterval = time.Second
	// MinRepairInterval is the shortest RepairInterval Validate accepts: each pass costs a walk
	// over the queue's partitions.
	MinRepairInterval = 100 * time.Millisecond
	// DefaultClaimTimeout bounds each short database call of the drainer (see Config.ClaimTimeout).
	DefaultClaimTimeout = 10 * time.Second
	// MaxLease is the longest Lease (and LockTransactionTimeout) Validate accepts.
	MaxLease = 24 * time.Hour
	// LeaseMargin is kept between the end of an apply's deadline and the end of its lease, so
	// that a result is back before anyone else can claim the row: an apply's deadline is
	// min(ApplyTimeout, lease end - LeaseMargin), measured on this process's clock from the moment
	// the claim was sent (so clock skew with the server can only shorten it). In lock mode it is
	// kept between the last apply's deadline and the end of LockTransactionTimeout, for
	// settle_locked and COMMIT.
	LeaseMargin = time.Second
)

// DefaultLease returns the lease used when Config.Lease is zero: twice the apply timeout plus
// LeaseMargin, so a row that waited for a free apply slot rarely needs an extension. A
// non-positive applyTimeout takes its default (DefaultApplyTimeout); a result too long for a
// Duration is the longest Duration (which Validate refuses, as it does any Lease over MaxLease).
func DefaultLease(applyTimeout time.Duration) time.Duration {
	if applyTimeout <= 0 {
		applyTimeout = DefaultApplyTimeout
	}
	if applyTimeout > (math.MaxInt64-LeaseMargin)/2 {
		return math.MaxInt64
	}
	return 2*applyTimeout + LeaseMargin
}

// DefaultLockTransactionTimeout returns the bound used when Config.LockTransactionTimeout is zero:
// the longest a lock-mode batch can take when every apply uses its full ApplyTimeout (the batch's
// rows, ApplyConcurrency at a time) plus LeaseMargin for settle_locked and COMMIT. Zero or negative
// arguments take their defaults; a result too long for a Duration is the longest Duration (which
// Validate refuses, as it does any bound over MaxLease). With the defaults (32 rows one at a time,
// 5s each) it is 2m41s.
func DefaultLockTransactionTimeout(batchSize, applyConcurrency int, applyTimeout time.Duration) time.Duration {
	c := Config{BatchSize: max(batchSize, 0), ApplyConcurrency: max(applyConcurrency, 0),
		ApplyTimeout: max(applyTimeout, 0)}.withDefaults()
	return c.lockTransactionFloor()
}

// ClaimMode selects how rows are claimed and how their results are written.
type ClaimMode int

const (
	// ClaimLease (the default) leases rows with a per-row fencing token in one short transaction
	// (outbox.claim_batch); applies run outside any transaction, as a continuous pipeline (a free
	// apply slot is refilled at once, results are recorded as they finish, in batches) and their
	// results count only while the token still matches (outbox.apply_results). No transaction
	// stays open during an apply, so it suits slow or unreliable peers. Each row is written twice
	// (lease, result).
	ClaimLease ClaimMode = iota
	// ClaimLock is seed 001's claim transaction: BEGIN; outbox.claim_locked; apply the batch;
	// outbox.settle_locked; COMMIT. The row lock is the fence and each row is written once, which
	// is measurably faster, but a transaction (and a pooled connection) stays open for the whole
	// batch, up to LockTransactionTimeout, and the next batch is claimed only when the slowest
	// apply of this one has returned: pick it for fast peers only.
	ClaimLock
)

// String returns "lease" or "lock".
func (m ClaimMode) String() string {
	switch m {
	case ClaimLease:
		return "lease"
	case ClaimLock:
		return "lock"
	}
	return fmt.Sprintf("ClaimMode(%d)", int(m))
}

// PermanentPolicy is a queue's permanent_policy (outbox.create_queue): what a permanent apply
// failure does to a row. The SQL function outbox.apply_results applies it; the drainer can only
// expect one (Config.ExpectPermanentPolicy). The zero value expects nothing.
type PermanentPolicy int

const (
	// PoisonPermanent ('poison', create_queue's default) poisons the row: attempt_count = max
	// attempts, never retried (outbox.requeue_poisoned gives it a fresh start). On a partitioned
	// queue its successors then skip it.
	PoisonPermanent PermanentPolicy = iota + 1
	// RetryPermanent ('retry') retries a permanent failure like a transient one, with backoff,
	// until max attempts. Only for queues without a partition column: a row that can never apply
	// would wedge its partition forever (create_queue refuses the pair, and so does Validate).
	RetryPermanent
)

// String returns the SQL name of the policy: "poison" or "retry" ("" for the zero value).
func (p PermanentPolicy) String() string {
	switch p {
	case 0:
		return ""
	case PoisonPermanent:
		return "poison"
	case RetryPermanent:
		return "retry"
	}
	return fmt.Sprintf("PermanentPolicy(%d)", int(p))
}

// Config configures a Drainer. Only Table is required; every other zero field takes its default.
//
// Every field configures this drainer, except the Expect fields. Max attempts, backoff, the
// permanent policy, the partition column and the channel are the queue's, not the drainer's: they
// are set by outbox.create_queue (as the queue's owner or pgdrain_operator) and applied by the SQL
// functions, which is why a drainer that runs as pgdrain_worker cannot change them. An Expect
// field, when set, is a check: Run reads the registration (outbox.queue_info) and fails at start,
// with an error matching ErrRegistrationMismatch that names the field, when the queue is registered
// otherwise, so a drainer never runs believing in a policy the database does not apply. Leave
// them zero to accept whatever is registered.
type Config struct {
	// Table is the queue table, "schema.table" (or "table" for schema public), as registered with
	// outbox.create_queue. Required.
	Table string
	// BatchSize is how many rows one claim takes (and, in lease mode with ApplyConcurrency 1, how
	// many the drainer holds at most). Defaults to 32 (DefaultBatchSize).
	BatchSize int
	// PollFallback is how often the drainer claims even without a NOTIFY (a missed NOTIFY costs at
	// most this long). At least MinPollFallback (100ms). Defaults to 30s (DefaultPollFallback).
	PollFallback time.Duration
	// PollOnly turns LISTEN off: the drainer never waits for a NOTIFY and claims every
	// PollFallback, besides its other wake-ups (the earliest backoff or lease end, room after a
	// claim that found rows, results recorded). For a pool behind a transaction pooler
	// (PgBouncer's pool_mode=transaction, where LISTEN cannot work) when no direct connection for
	// WithListenPool is available: lower PollFallback then, it bounds how long a new row waits
	// (docs/pgbouncer.md). Defaults to false.
	PollOnly bool
	// ApplyTimeout bounds one Applier call, and is also the shutdown grace: an apply in flight when
	// Run's ctx is cancelled keeps a non-cancellable context with this deadline and its result is
	// still recorded; Run does not wait for an apply that ignores its context longer than that.
	// Defaults to 5s (DefaultApplyTimeout).
	ApplyTimeout time.Duration
	// ApplyConcurrency is how many applies run at the same time (the Applier must be safe for
	// concurrent use when it is above 1). In lease mode a slot is refilled as soon as it frees: the
	// drainer holds at most BatchSize rows when ApplyConcurrency is 1 and ApplyConcurrency rows
	// otherwise (claimed, waiting or applying), and claims again when no claimed row is waiting for
	// a slot and a quarter of that (at least one row) is free, or nothing is running. In lock mode a claim takes exactly ApplyConcurrency rows
	// when it is above 1, all applied at once. It is a throughput knob, not an ordering one: the
	// drainer never promises id order (claims are ordered attempt_count, id, so fresh rows
	// overtake retried ones); only the queue's partition column gives order, per key. When applies
	// are much faster than claims, a lease-mode claim after a full one waits (at most a
	// millisecond) for the whole window, since a claim and its results cost about the same
	// whatever their size. Defaults to 1 (DefaultApplyConcurrency).
	ApplyConcurrency int
	// RunLength is how many rows of one partition a claim may take together (outbox.claim_batch's
	// and claim_locked's run_length): the partition's head and the rows that follow it, at most
	// BatchSize (ApplyConcurrency when that is above 1) in all. A run is applied in its partition's
	// order in one apply slot and stops at its first failure; the rest of it is given back untouched
	// (lease mode) or left unsettled (lock mode). Its results are recorded together, so the
	// partition's head moves once per run rather than once per row: on a partitioned queue whose
	// keys have several rows pending this cuts the database's work per event. Unpartitioned queues
	// ignore it. Defaults to 1 (DefaultRunLength): one row per partition per claim.
	RunLength int
	// WedgeWarnAfter, when positive on a partitioned queue with a WithWedgeObserver, makes the
	// drainer report (at most once per WedgeWarnAfter) the oldest partitions whose oldest pending
	// row is older than this; at least MinWedgeWarnAfter (100ms). Defaults to 0: off, at zero cost.
	WedgeWarnAfter time.Duration
	// Lease is how long a claimed row is this drainer's in lease mode. It must be longer than
	// ApplyTimeout + LeaseMargin. Lease mode only. Defaults to 2*ApplyTimeout + LeaseMargin
	// (DefaultLease).
	Lease time.Duration
	// ClaimMode is ClaimLease (the default) or ClaimLock.
	ClaimMode ClaimMode
	// LockTransactionTimeout bounds how long a lock-mode claim transaction stays open, from BEGIN
	// to COMMIT (a pooled connection and the rows' locks are held meanwhile). An apply starts only
	// when its full ApplyTimeout ends LeaseMargin before this bound; at that point the rows whose
	// applies have returned are settled and committed even if another apply (one that ignores its
	// context) is still running: its row is unlocked untouched and claimed again (delivered again).
	// It must leave every row of a batch its full ApplyTimeout: at least ceil(claimed rows /
	// ApplyConcurrency) * ApplyTimeout + LeaseMargin, where a claim takes BatchSize rows
	// (ApplyConcurrency when that is above 1). The claim transaction runs with the server's
	// idle_in_transaction_session_timeout set to this bound plus 2*LeaseMargin (local to it,
	// whatever the role's or database's setting), so that the server ends a batch whose drainer
	// vanished. Lock mode only. Defaults to that minimum (DefaultLockTransactionTimeout).
	LockTransactionTimeout time.Duration
	// ClaimTimeout bounds every short database call of the drainer, each on its own: a claim
	// (outbox.claim_batch; in lock mode BEGIN and outbox.claim_locked), the next wake-up time
	// (outbox.next_due), a lease-mode result flush (outbox.apply_results) and release, and at start
	// the ping and the queue's registration (per attempt). A call that gets no answer in time, as
	// from a host that vanished without a reset (the kernel would wait about 15 minutes), is
	// abandoned: pgx closes its connection, the drainer retries with backoff (logging at Warn) and
	// the pool dials again. Lease extensions are bounded by the lease, lock-mode settling by
	// LockTransactionTimeout, the repair pass by 2 minutes. A dial the pool goes on with in the
	// background is bounded by the DSN's connect_timeout (pgxpool: 2 minutes when unset). Keep it above the slowest
	// claim you expect under load: a claim cut short is retried, its rows leased meanwhile wait for
	// their leases. It must be at least MinClaimTimeout (100ms) and at most Lease (lease mode) or
	// LockTransactionTimeout (lock mode). Defaults to 10s (DefaultClaimTimeout), or that bound when
	// it is shorter.
	ClaimTimeout time.Duration
	// RepairInterval is how often the drainer runs outbox.repair, which finds pending rows that no
	// claim can reach because derived state (partition heads, their floors and parks) disagrees
	// with the queue table, and fixes it. Each fix is logged at Warn and counted in
	// pgdrain_repairs_total{queue,cause}; after one, the drainer claims at once. The SQL side lets
	// one session at a time repair a queue, so replicas take turns. The first pass runs when Run
	// starts. Each pass also re-reads the queue's registration and moves the drainer's LISTEN to
	// the channel it names, when outbox.create_queue changed it while the drainer ran (logged at
	// Info). A pass walks the queue's keys with pending rows, so its cost grows with them: after a
	// pass that took d, the next waits until at least ten times d after it started (a pass takes at
	// most a tenth of the drainer's time), and a pass cut off at its bound (2 minutes at first) gets
	// twice the bound the next time, up to 32 minutes (logged at Warn). Negative turns the pass off;
	// a positive value must be at least MinRepairInterval. Defaults to 1m (DefaultRepairInterval).
	RepairInterval time.Duration
	// BusyPoll is how long after a claim that found rows the drainer keeps claiming on a timer
	// (after 1 ms, then after as long as it has been idle, at most 10 ms apart) before it marks
	// itself waiting for a NOTIFY (a queue that notifies 'when_waiting', outbox.set_notify). A
	// NOTIFY serialises the commits of every transaction that sends one, through their WAL
	// flushes: a drainer that asks for one after every row it drains makes each producer's commit
	// notify, and producers beside running drainers slowed down 3-4x (issue 29). While rows keep
	// coming, polling finds them within milliseconds and producers send none; an idle queue costs
	// about ten empty claims per BusyPoll, then one NOTIFY per wake-up as before. Negative turns it
	// off; at most MaxBusyPoll. Defaults to 50ms (DefaultBusyPoll).
	BusyPoll time.Duration
	// TrickleInterval is the least time between the starts of two claims while rows trickle in.
	// After a claim that found some rows but fewer than it asked for, none of a partition the
	// last claim with rows also found rows of, the next claim waits until TrickleInterval after
	// that one started, whatever wakes the drainer meanwhile (a NOTIFY, a recorded result); an
	// empty claim changes nothing. A claim and its results cost nearly as much for one row as for
	// several, and a drainer that claimed at once after every row of a steady trickle made the
	// producers beside it wait for the CPU and WAL flushes it used (issue 29). What it costs:
	// under a steady trickle a row is delivered up to TrickleInterval later; a row after a quiet
	// spell is claimed as soon as its NOTIFY arrives; a full claim that found a row older than
	// the last claim with rows (a backlog), and a claim that found a partition again (rows
	// waiting behind its head), are followed at once, so neither throughput nor a busy
	// partition's pace depends on it (a full claim of rows that all arrived since the last one is
	// paced: a burst waits at most one TrickleInterval). Replicas of one queue take turns
	// (outbox.claim_turn): once its own pause is over, a paced drainer claims only when no
	// replica has taken a turn in the last TrickleInterval, so together they claim about as often
	// as one.
	// Negative turns it off; at most MaxTrickleInterval. Defaults to 20ms (DefaultTrickleInterval).
	TrickleInterval time.Duration
	// AsyncResults, in lease mode, records results with synchronous_commit off: the drainer does
	// not wait for its results' WAL flush (nor for a synchronous standby), so the producers that
	// share the server's disk do not queue behind those flushes either (issue 29: one drainer
	// beside four producers at 400 transactions/s, fsync on, took their latency from 1.29–1.47× to
	// 1.06–1.09× of their latency alone). The price: a server crash (or a failover) may lose
	// results recorded in the moments before it, and those rows are delivered again once their
	// lease ends: at-least-once as always, and never two workers at once, since claims (the leases
	// and their tokens) are still committed synchronously. Not for lock mode (Validate refuses
	// it): a lock-mode transaction may carry the Applier's own writes. Defaults to false.
	AsyncResults bool

	// ExpectPartitionColumn, when set, makes Run fail unless the queue is registered with this
	// partition_column: a row is then claimed only when no deliverable row with a smaller id exists
	// in its partition, across batches and replicas. The key is chosen at outbox.create_queue: the
	// narrowest key on which events do not commute (a wider key only over-serializes; a narrower
	// one loses order). Defaults to "" (no expectation).
	ExpectPartitionColumn string
	// ExpectChannel, when set, makes Run fail unless the queue's insert trigger notifies this
	// channel (the drainer LISTENs on the registered channel). Defaults to "" (no expectation).
	ExpectChannel string
	// ExpectMaxAttempts, when set, makes Run fail unless the queue is registered with this
	// max_attempts, the poison mark (outbox.create_queue's default is 10, DefaultMaxAttempts).
	// Defaults to 0 (no expectation).
	ExpectMaxAttempts int
	// ExpectBackoffMin and ExpectBackoffMax, when set, make Run fail unless the queue is registered
	// with this backoff_min / backoff_max, the bounds of the exponential retry delay
	// (outbox.create_queue's defaults are 1s and 30s, DefaultBackoffMin and DefaultBackoffMax).
	// Default to 0 (no expectation).
	ExpectBackoffMin time.Duration
	ExpectBackoffMax time.Duration
	// ExpectPermanentPolicy, when set, makes Run fail unless the queue is registered with this
	// permanent_policy (outbox.create_queue's default is PoisonPermanent). RetryPermanent cannot be
	// expected together with an ExpectPartitionColumn. Defaults to 0 (no expectation).
	ExpectPermanentPolicy PermanentPolicy
}

var (
	identPattern = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,62}$`)
)

// withDefaults returns c with every zero field that has a default set to it. The Expect fields
// have none: zero means no expectation.
func (c Config) withDefaults() Config {
	c.BatchSize = cmp.Or(c.BatchSize, DefaultBatchSize)
	c.PollFallback = cmp.Or(c.PollFallback, DefaultPollFallback)
	c.ApplyTimeout = cmp.Or(c.ApplyTimeout, DefaultApplyTimeout)
	c.ApplyConcurrency = cmp.Or(c.ApplyConcurrency, DefaultApplyConcurrency)
	c.RunLength = cmp.Or(c.RunLength, DefaultRunLength)
	c.Lease = cmp.Or(c.Lease, DefaultLease(c.ApplyTimeout))
	c.LockTransactionTimeout = cmp.Or(c.LockTransactionTimeout, c.lockTransactionFloor())
	c.RepairInterval = cmp.Or(c.RepairInterval, DefaultRepairInterval)
	c.BusyPoll = cmp.Or(c.BusyPoll, DefaultBusyPoll)
	c.TrickleInterval = cmp.Or(c.TrickleInterval, DefaultTrickleInterval)
	if c.ClaimTimeout == 0 {
		c.ClaimTimeout = DefaultClaimTimeout
		if bound := c.claimTimeoutBound(); bound > 0 { // a bad bound is reported by its own field
			c.ClaimTimeout = min(c.ClaimTimeout, bound)
		}
	}
	return c
}

// claimSize is how many rows one claim asks for at most (and, in lease mode, how many rows the
// drainer holds at most).
func (c Config) claimSize() int {
	if c.ApplyConcurrency > 1 {
		return c.ApplyConcurrency
	}
	return c.BatchSize
}

// claimTimeoutBound is the longest ClaimTimeout: a lease-mode claim that outlasts Lease returns
// rows that others may claim already; a lock-mode claim must fit in its transaction's bound.
func (c Config) claimTimeoutBound() time.Duration {
	if c.ClaimMode == ClaimLock {
		return c.LockTransactionTimeout
	}
	return c.Lease
}

// lockWaves is how many applies one apply slot runs, at most, for one lock-mode batch: its share
// of the batch, and with runs up to a whole run more (a slot takes a run whole).
func (c Config) lockWaves() int {
	n, slots := max(c.claimSize(), 1), max(c.ApplyConcurrency, 1)
	waves := (n + slots - 1) / slots
	if slots > 1 {
		waves += min(max(c.RunLength, 1), n) - 1
	}
	return waves
}

// lockTransactionFloor is the shortest LockTransactionTimeout that gives every row of a batch its
// full ApplyTimeout and leaves LeaseMargin for settling (the longest Duration when that is longer).
func (c Config) lockTransactionFloor() time.Duration {
	waves := time.Duration(c.lockWaves())
	if c.ApplyTimeout > 0 && c.ApplyTimeout > (math.MaxInt64-LeaseMargin)/waves {
		return math.MaxInt64
	}
	return waves*c.ApplyTimeout + LeaseMargin
}

// Validate reports every problem of c (after defaults), one line each, every line starting with
// the field name. It needs no database; Run additionally checks the Expect fields against the
// queue's registration.
func (c Config) Validate() error {
	leaseGiven, lockBoundGiven := c.Lease != 0, c.LockTransactionTimeout != 0
	c = c.withDefaults()
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	switch {
	case c.Table == "":
		bad("Table must be set to the queue table (\"schema.table\")")
	case !sqlrule.QueueName.MatchString(c.Table):
		bad("Table must be a plain name \"schema.table\" (letters, digits, _), got %q", c.Table)
	}
	if c.BatchSize < 1 || c.BatchSize > MaxBatchSize {
		bad("BatchSize must be between 1 and %d, got %d", MaxBatchSize, c.BatchSize)
	}
	if c.RunLength < 1 || c.RunLength > MaxRunLength {
		bad("RunLength must be between 1 and %d, got %d", MaxRunLength, c.RunLength)
	}
	if c.PollFallback <= 0 {
		bad("PollFallback must be positive, got %s", c.PollFallback)
	} else if c.PollFallback < MinPollFallback {
		bad("PollFallback must be at least MinPollFallback (%s), got %s", MinPollFallback, c.PollFallback)
	}
	applyTimeoutOK := c.ApplyTimeout > 0 && c.ApplyTimeout <= MaxLease
	switch {
	case c.ApplyTimeout <= 0:
		bad("ApplyTimeout must be positive, got %s", c.ApplyTimeout)
	case c.ApplyTimeout > MaxLease: // the lease, or lock-mode transaction, that covers it could not be
		bad("ApplyTimeout must be at most %s, got %s", MaxLease, c.ApplyTimeout)
	}
	if c.ApplyConcurrency < 1 || c.ApplyConcurrency > MaxBatchSize {
		bad("ApplyConcurrency must be between 1 and %d, got %d", MaxBatchSize, c.ApplyConcurrency)
	}
	if c.WedgeWarnAfter < 0 {
		bad("WedgeWarnAfter must be 0 (off) or positive, got %s", c.WedgeWarnAfter)
	} else if c.WedgeWarnAfter > 0 && c.WedgeWarnAfter < MinWedgeWarnAfter {
		bad("WedgeWarnAfter must be 0 (off) or at least MinWedgeWarnAfter (%s), got %s", MinWedgeWarnAfter, c.WedgeWarnAfter)
	}
	if c.ClaimMode != ClaimLock { // not used in lock mode
		switch {
		case !leaseGiven && !applyTimeoutOK:
			// Derived from the ApplyTimeout reported above: nothing of its own to report.
		case !leaseGiven && c.Lease > MaxLease:
			bad("Lease must be at most %s, got its default 2*ApplyTimeout + LeaseMargin = %s: lower ApplyTimeout or set Lease",
				MaxLease, c.Lease)
		case c.Lease > MaxLease:
			bad("Lease must be at most %s, got %s", MaxLease, c.Lease)
		case applyTimeoutOK && c.Lease <= c.ApplyTimeout+LeaseMargin:
			bad("Lease must be longer than ApplyTimeout (%s) plus LeaseMargin (%s), got %s", c.ApplyTimeout, LeaseMargin, c.Lease)
		case !applyTimeoutOK && c.Lease <= 0:
			bad("Lease must be positive, got %s", c.Lease)
		}
	}
	if c.AsyncResults && c.ClaimMode == ClaimLock {
		bad("AsyncResults is for lease mode only: a lock-mode transaction may carry the Applier's own writes, got ClaimLock")
	}
	if c.ClaimMode != ClaimLease && c.ClaimMode != ClaimLock {
		bad("ClaimMode must be ClaimLease or ClaimLock, got %d", int(c.ClaimMode))
	}
	switch {
	case lockBoundGiven && c.LockTransactionTimeout < 0:
		bad("LockTransactionTimeout must be positive (or 0 for the default), got %s", c.LockTransactionTimeout)
	case c.ClaimMode != ClaimLock:
		// Not used in lease mode.
	case applyTimeoutOK && c.BatchSize >= 1 && c.ApplyConcurrency >= 1:
		if !lockBoundGiven && c.LockTransactionTimeout > MaxLease {
			bad("LockTransactionTimeout must be at most %s, got its default %s (%d sequential applies of ApplyTimeout %s per slot: "+
				"BatchSize %d, ApplyConcurrency %d; plus LeaseMargin %s): lower BatchSize or ApplyTimeout, or raise ApplyConcurrency",
				MaxLease, c.LockTransactionTimeout, c.lockWaves(), c.ApplyTimeout, c.BatchSize, c.ApplyConcurrency, LeaseMargin)
			break
		}
		if floor := c.lockTransactionFloor(); c.LockTransactionTimeout < floor {
			bad("LockTransactionTimeout must be at least %s (%d sequential applies of ApplyTimeout %s per slot: "+
				"BatchSize %d, ApplyConcurrency %d; plus LeaseMargin %s), got %s: lower BatchSize or ApplyTimeout, or raise ApplyConcurrency",
				floor, c.lockWaves(), c.ApplyTimeout, c.BatchSize, c.ApplyConcurrency, LeaseMargin, c.LockTransactionTimeout)
		}
		if c.LockTransactionTimeout > MaxLease {
			bad("LockTransactionTimeout must be at most %s, got %s", MaxLease, c.LockTransactionTimeout)
		}
	}
	switch bound, name := c.claimTimeoutBound(), "Lease"; {
	case c.ClaimTimeout < 0:
		bad("ClaimTimeout must be positive (or 0 for the default), got %s", c.ClaimTimeout)
	case c.ClaimTimeout < MinClaimTimeout && c.ClaimTimeout < bound:
		bad("ClaimTimeout must be at least MinClaimTimeout (%s) (or 0 for the default), got %s", MinClaimTimeout, c.ClaimTimeout)
	case bound <= 0:
		// Lease or LockTransactionTimeout is already reported.
	case c.ClaimTimeout > bound:
		if c.ClaimMode == ClaimLock {
			name = "LockTransactionTimeout"
		}
		bad("ClaimTimeout must be at most %s (%s), got %s", name, bound, c.ClaimTimeout)
	}
	if c.BusyPoll > MaxBusyPoll {
		bad("BusyPoll must be at most MaxBusyPoll (%s), or negative to turn it off, got %s", MaxBusyPoll, c.BusyPoll)
	}
	if c.TrickleInterval > MaxTrickleInterval {
		bad("TrickleInterval must be at most MaxTrickleInterval (%s), or negative to turn it off, got %s",
			MaxTrickleInterval, c.TrickleInterval)
	}
	if c.RepairInterval > 0 && c.RepairInterval < MinRepairInterval {
		bad("RepairInterval must be at least MinRepairInterval (%s), or negative to turn the repair pass off, got %s",
			MinRepairInterval, c.RepairInterval)
	}
	if c.ExpectPartitionColumn != "" && !identPattern.MatchString(c.ExpectPartitionColumn) {
		bad("ExpectPartitionColumn must be a plain column name, got %q", c.ExpectPartitionColumn)
	}
	if c.ExpectChannel != "" && !identPattern.MatchString(c.ExpectChannel) {
		bad("ExpectChannel must be a plain name of at most 63 characters, got %q", c.ExpectChannel)
	}
	if c.ExpectMaxAttempts < 0 || c.ExpectMaxAttempts > MaxMaxAttempts {
		bad("ExpectMaxAttempts must be 0 (no expectation) or between 1 and %d, got %d", MaxMaxAttempts, c.ExpectMaxAttempts)
	}
	if c.ExpectBackoffMin < 0 {
		bad("ExpectBackoffMin must be 0 (no expectation) or positive, got %s", c.ExpectBackoffMin)
	}
	switch {
	case c.ExpectBackoffMax < 0:
		bad("ExpectBackoffMax must be 0 (no expectation) or positive, got %s", c.ExpectBackoffMax)
	case c.ExpectBackoffMax > 0 && c.ExpectBackoffMax < c.ExpectBackoffMin:
		bad("ExpectBackoffMax must be at least ExpectBackoffMin (%s), got %s", c.ExpectBackoffMin, c.ExpectBackoffMax)
	}
	switch c.ExpectPermanentPolicy {
	case 0, PoisonPermanent:
	case RetryPermanent:
		if c.ExpectPartitionColumn != "" {
			bad("ExpectPermanentPolicy RetryPermanent cannot hold with an ExpectPartitionColumn (%q): outbox.create_queue refuses "+
				"'retry' on a partitioned queue, since an event that can never apply would wedge its partition forever", c.ExpectPartitionColumn)
		}
	default:
		bad("ExpectPermanentPolicy must be 0 (no expectation), PoisonPermanent or RetryPermanent, got %d", int(c.ExpectPermanentPolicy))
	}
	return errors.Join(errs...)
}

// canonicalTable is the queue name as the registry stores it: lower case, schema-qualified.
func canonicalTable(table string) string {
	t := strings.ToLower(table)
	if !strings.Contains(t, ".") {
		t = "public." + t
	}
	return t
}
