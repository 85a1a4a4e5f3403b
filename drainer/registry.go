package drainer

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"
)

// registration is what outbox.queue_info returns: the settings the SQL functions apply.
type registration struct {
	queue           string // canonical "schema.table"
	partitionColumn string // "" when unpartitioned
	maxAttempts     int
	backoffMin      time.Duration
	backoffMax      time.Duration
	permanentPolicy PermanentPolicy
	channel         string
}

// loadRegistration reads the queue's registration through outbox.queue_info (granted to
// pgdrain_worker), or fails with ErrQueueNotRegistered naming the queue when there is none.
func loadRegistration(ctx context.Context, db querier, table string) (registration, error) {
	return queryQueueInfo(ctx, db, table)
}

// reconcile fills the registry settings that c leaves zero from r and fails, naming the field,
// when a set one disagrees: the SQL functions apply the registered values, so they win.
func reconcile(c Config, r registration) (Config, error) {
	var errs []error
	mismatch := func(field string, got, registered any, column string) {
		errs = append(errs, fmt.Errorf(
			"%s is %v but queue %s is registered with %s %v; the SQL registry wins: leave %s zero or change the queue with outbox.create_queue",
			field, got, r.queue, column, registered, field))
	}
	if c.MaxAttempts == 0 {
		c.MaxAttempts = r.maxAttempts
	} else if c.MaxAttempts != r.maxAttempts {
		mismatch("MaxAttempts", c.MaxAttempts, r.maxAttempts, "max_attempts")
	}
	if c.BackoffMin == 0 {
		c.BackoffMin = r.backoffMin
	} else if c.BackoffMin != r.backoffMin {
		mismatch("BackoffMin", c.BackoffMin, r.backoffMin, "backoff_min")
	}
	if c.BackoffMax == 0 {
		c.BackoffMax = r.backoffMax
	} else if c.BackoffMax != r.backoffMax {
		mismatch("BackoffMax", c.BackoffMax, r.backoffMax, "backoff_max")
	}
	if c.PermanentPolicy == PoisonPermanent {
		c.PermanentPolicy = r.permanentPolicy
	} else if c.PermanentPolicy != r.permanentPolicy {
		mismatch("PermanentPolicy", c.PermanentPolicy, r.permanentPolicy, "permanent_policy")
	}
	if c.PartitionColumn == "" {
		c.PartitionColumn = r.partitionColumn
	} else if !strings.EqualFold(c.PartitionColumn, r.partitionColumn) {
		mismatch("PartitionColumn", quoteOrNone(c.PartitionColumn), quoteOrNone(r.partitionColumn), "partition_column")
	}
	if c.Channel == "" {
		c.Channel = r.channel
	} else if !strings.EqualFold(c.Channel, r.channel) {
		mismatch("Channel", quoteOrNone(c.Channel), quoteOrNone(r.channel), "channel")
	}
	if err := errors.Join(errs...); err != nil {
		return c, err
	}
	c = c.withDefaults()
	return c, c.Validate()
}

func quoteOrNone(s string) string {
	if s == "" {
		return "none"
	}
	return fmt.Sprintf("%q", s)
}
