package drainer

import (
	"cmp"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"time"
)

// Defaults and limits of Config. A zero field takes its default (or, for the settings that live in
// the queue's registry, the registered value: see Config).
const (
	// DefaultBatchSize is how many rows one claim takes when ApplyConcurrency is 1.
	DefaultBatchSize = 32
	// MaxBatchSize is the largest claim the SQL functions accept.
	MaxBatchSize = 10000
	// DefaultPollFallback is how often the drainer claims even when no NOTIFY arrived.
	DefaultPollFallback = 30 * time.Second
	// DefaultMaxAttempts is the poison mark of a queue created with outbox.create_queue's defaults.
	DefaultMaxAttempts = 10
	// MaxMaxAttempts is the largest max_attempts outbox.create_queue accepts.
	MaxMaxAttempts = 1000
	// DefaultBackoffMin is the shortest retry delay of a queue created with the defaults.
	DefaultBackoffMin = time.Second
	// DefaultBackoffMax is the longest retry delay of a queue created with the defaults.
	DefaultBackoffMax = 30 * time.Second
	// DefaultApplyTimeout bounds one Applier call.
	DefaultApplyTimeout = 5 * time.Second
	// DefaultApplyConcurrency applies a batch's rows one after another.
	DefaultApplyConcurrency = 1
	// DefaultRepairInterval is how often the repair pass runs (outbox.repair).
	DefaultRepairInterval = time.Minute
	// MinRepairInterval is the shortest RepairInterval Validate accepts: each pass costs a walk
	// over the queue's partitions.
	MinRepairInterval = 100 * time.Millisecond
	// LeaseMargin is kept between the end of an apply's deadline and the end of its lease, so
	// that a result is back before anyone else can claim the row: an apply's deadline is
	// min(ApplyTimeout, lease end - LeaseMargin), measured on this process's clock from the moment
	// the claim was sent (so clock skew with the server can only shorten it).
	LeaseMargin = time.Second
)

// DefaultLease returns the lease used when Config.Lease is zero: twice the apply timeout plus
// LeaseMargin, so the first apply of a batch always gets its full ApplyTimeout and the rest of the
// batch rarely needs an extension.
func DefaultLease(applyTimeout time.Duration) time.Duration {
	return 2*cmp.Or(applyTimeout, DefaultApplyTimeout) + LeaseMargin
}

// ClaimMode selects how rows are claimed and how their results are written.
type ClaimMode int

const (
	// ClaimLease (the default) leases rows with a per-row fencing token in one short transaction
	// (outbox.claim_batch); applies run outside any transaction and their results count only
	// while the token still matches (outbox.apply_results). No transaction stays open during an
	// apply, so it suits slow or unreliable peers. Each row is written twice (lease, result).
	ClaimLease ClaimMode = iota
	// ClaimLock is seed 001's claim transaction: BEGIN; outbox.claim_locked; apply the batch;
	// outbox.settle_locked; COMMIT. The row lock is the fence and each row is written once, which
	// is measurably faster, but a transaction (and a pooled connection) stays open for the whole
	// batch, up to ApplyTimeout per sequential apply: pick it for fast peers only.
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

// PermanentPolicy says what a permanent apply failure does to a row. It mirrors the queue's
// registered permanent_policy, which is what outbox.apply_results actually applies.
type PermanentPolicy int

const (
	// PoisonPermanent (the default) poisons the row: attempt_count = max attempts, never retried
	// (outbox.requeue_poisoned gives it a fresh start). On a partitioned queue its successors
	// then skip it.
	PoisonPermanent PermanentPolicy = iota
	// RetryPermanent retries a permanent failure like a transient one, with backoff, until max
	// attempts. Only for queues without a PartitionColumn: a row that can never apply would wedge
	// its partition forever. Validate rejects the pair.
	RetryPermanent
)

// String returns the SQL name of the policy: "poison" or "retry".
func (p PermanentPolicy) String() string {
	switch p {
	case PoisonPermanent:
		return "poison"
	case RetryPermanent:
		return "retry"
	}
	return fmt.Sprintf("PermanentPolicy(%d)", int(p))
}

// Config configures a Drainer. Only Table is required.
//
// Max attempts, backoff, the permanent policy, the partition column and the channel live in the
// queue's SQL registry (written by outbox.create_queue, read through outbox.queue_info), and the
// SQL functions are what applies them: the SQL side wins. Leave those fields zero to take the
// registered values; a non-zero value that differs from the registration makes Run fail at start
// with an error naming the field, so a drainer never believes in a policy the database does not
// apply.
type Config struct {
	// Table is the queue table, "schema.table" (or "table" for schema public), as registered with
	// outbox.create_queue. Required.
	Table string
	// Channel is the LISTEN channel the queue's insert trigger notifies. Defaults to the
	// registered channel.
	Channel string
	// BatchSize is how many rows one claim takes. Defaults to 32 (DefaultBatchSize).
	BatchSize int
	// PollFallback is how often the drainer claims even without a NOTIFY (a missed NOTIFY costs at
	// most this long). Defaults to 30s (DefaultPollFallback).
	PollFallback time.Duration
	// MaxAttempts is the poison mark: a row with this many attempts is never retried. Registry
	// setting: defaults to the registered max_attempts (DefaultMaxAttempts for a queue created with
	// defaults); a different non-zero value is an error.
	MaxAttempts int
	// BackoffMin and BackoffMax bound the exponential retry delay. Registry settings: default to
	// the registered backoff_min/backoff_max (DefaultBackoffMin, DefaultBackoffMax for a queue
	// created with defaults); different non-zero values are an error.
	BackoffMin time.Duration
	BackoffMax time.Duration
	// ApplyTimeout bounds one Applier call, and is also the shutdown grace: an apply in flight when
	// Run's ctx is cancelled keeps a non-cancellable context with this deadline, so its result is
	// still recorded. Defaults to 5s (DefaultApplyTimeout).
	ApplyTimeout time.Duration
	// ApplyConcurrency is how many rows of one batch are applied in parallel (the Applier must be
	// safe for concurrent use when it is above 1). When above 1 the claim batch is sized to exactly
	// ApplyConcurrency, so a whole wave is applied at once; results still go back in one round
	// trip per batch. It is a throughput knob, not an ordering one: the drainer never promises id
	// order (claims are ordered attempt_count, id, so fresh rows overtake retried ones); only a
	// PartitionColumn gives order, per key. Defaults to 1 (DefaultApplyConcurrency).
	ApplyConcurrency int
	// PartitionColumn is the queue's order key: a row is claimed only when no deliverable row with
	// a smaller id exists in its partition, across batches and replicas. Choose the narrowest key
	// on which events do not commute (a wider key only over-serializes; a narrower one loses
	// order). Registry setting: defaults to the registered partition_column; a different non-empty
	// value is an error.
	PartitionColumn string
	// WedgeWarnAfter, when positive on a partitioned queue with a WithWedgeObserver, makes the
	// drainer report (at most once per WedgeWarnAfter) the oldest partitions whose oldest pending
	// row is older than this. Defaults to 0: off, at zero cost.
	WedgeWarnAfter time.Duration
	// PermanentPolicy is what a permanent apply failure does. Registry setting: the zero value
	// (PoisonPermanent) takes the registered permanent_policy; RetryPermanent must match it.
	PermanentPolicy PermanentPolicy
	// Lease is how long a claimed row is this drainer's in lease mode. It must be longer than
	// ApplyTimeout + LeaseMargin. Defaults to 2*ApplyTimeout + LeaseMargin (DefaultLease).
	Lease time.Duration
	// ClaimMode is ClaimLease (the default) or ClaimLock.
	ClaimMode ClaimMode
	// RepairInterval is how often the drainer runs outbox.repair, which finds pending rows that no
	// claim can reach because derived state (partition heads, their floors and parks) disagrees
	// with the queue table, and fixes it. Each fix is logged at Warn and counted in
	// pgdrain_repairs_total{queue,cause}; after one, the drainer claims at once. The SQL side lets
	// one session at a time repair a queue, so replicas take turns. The first pass runs when Run
	// starts. Negative turns the pass off; a positive value must be at least MinRepairInterval.
	// Defaults to 1m (DefaultRepairInterval).
	RepairInterval time.Duration
}

var (
	queueNamePattern = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,62}(\.[A-Za-z_][A-Za-z0-9_]{0,62})?$`)
	identPattern     = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,62}$`)
)

// withDefaults returns c with every zero field set to its default. Registry settings get the
// defaults of outbox.create_queue; Run replaces them with the registered values first.
func (c Config) withDefaults() Config {
	c.BatchSize = cmp.Or(c.BatchSize, DefaultBatchSize)
	c.PollFallback = cmp.Or(c.PollFallback, DefaultPollFallback)
	c.MaxAttempts = cmp.Or(c.MaxAttempts, DefaultMaxAttempts)
	c.BackoffMin = cmp.Or(c.BackoffMin, DefaultBackoffMin)
	c.BackoffMax = cmp.Or(c.BackoffMax, max(DefaultBackoffMax, c.BackoffMin))
	c.ApplyTimeout = cmp.Or(c.ApplyTimeout, DefaultApplyTimeout)
	c.ApplyConcurrency = cmp.Or(c.ApplyConcurrency, DefaultApplyConcurrency)
	c.Lease = cmp.Or(c.Lease, DefaultLease(c.ApplyTimeout))
	c.RepairInterval = cmp.Or(c.RepairInterval, DefaultRepairInterval)
	return c
}

// claimSize is how many rows one claim asks for.
func (c Config) claimSize() int {
	if c.ApplyConcurrency > 1 {
		return c.ApplyConcurrency
	}
	return c.BatchSize
}

// Validate reports every problem of c (after defaults), one line each, every line starting with
// the field name. It needs no database; Run additionally checks c against the queue's
// registration.
func (c Config) Validate() error {
	c = c.withDefaults()
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	switch {
	case c.Table == "":
		bad("Table must be set to the queue table (\"schema.table\")")
	case !queueNamePattern.MatchString(c.Table):
		bad("Table must be a plain name \"schema.table\" (letters, digits, _), got %q", c.Table)
	}
	if c.Channel != "" && !identPattern.MatchString(c.Channel) {
		bad("Channel must be a plain name of at most 63 characters, got %q", c.Channel)
	}
	if c.BatchSize < 1 || c.BatchSize > MaxBatchSize {
		bad("BatchSize must be between 1 and %d, got %d", MaxBatchSize, c.BatchSize)
	}
	if c.PollFallback <= 0 {
		bad("PollFallback must be positive, got %s", c.PollFallback)
	}
	if c.MaxAttempts < 1 || c.MaxAttempts > MaxMaxAttempts {
		bad("MaxAttempts must be between 1 and %d, got %d", MaxMaxAttempts, c.MaxAttempts)
	}
	if c.BackoffMin <= 0 {
		bad("BackoffMin must be positive, got %s", c.BackoffMin)
	}
	if c.BackoffMax < c.BackoffMin {
		bad("BackoffMax must be at least BackoffMin (%s), got %s", c.BackoffMin, c.BackoffMax)
	}
	if c.ApplyTimeout <= 0 {
		bad("ApplyTimeout must be positive, got %s", c.ApplyTimeout)
	}
	if c.ApplyConcurrency < 1 || c.ApplyConcurrency > MaxBatchSize {
		bad("ApplyConcurrency must be between 1 and %d, got %d", MaxBatchSize, c.ApplyConcurrency)
	}
	if c.PartitionColumn != "" && !identPattern.MatchString(c.PartitionColumn) {
		bad("PartitionColumn must be a plain column name, got %q", c.PartitionColumn)
	}
	if c.WedgeWarnAfter < 0 {
		bad("WedgeWarnAfter must be 0 (off) or positive, got %s", c.WedgeWarnAfter)
	}
	switch c.PermanentPolicy {
	case PoisonPermanent:
	case RetryPermanent:
		if c.PartitionColumn != "" {
			bad("PermanentPolicy RetryPermanent is not allowed with a PartitionColumn (%q): an event that can never apply would wedge its partition forever", c.PartitionColumn)
		}
	default:
		bad("PermanentPolicy must be PoisonPermanent or RetryPermanent, got %d", int(c.PermanentPolicy))
	}
	if c.Lease <= c.ApplyTimeout+LeaseMargin {
		bad("Lease must be longer than ApplyTimeout (%s) plus LeaseMargin (%s), got %s", c.ApplyTimeout, LeaseMargin, c.Lease)
	}
	if c.Lease > 24*time.Hour {
		bad("Lease must be at most 24h, got %s", c.Lease)
	}
	if c.ClaimMode != ClaimLease && c.ClaimMode != ClaimLock {
		bad("ClaimMode must be ClaimLease or ClaimLock, got %d", int(c.ClaimMode))
	}
	if c.RepairInterval > 0 && c.RepairInterval < MinRepairInterval {
		bad("RepairInterval must be at least MinRepairInterval (%s), or negative to turn the repair pass off, got %s",
			MinRepairInterval, c.RepairInterval)
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
