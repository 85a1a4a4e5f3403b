package drainer

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// registration is a queue's row in outbox.queues: the settings the SQL functions apply.
type registration struct {
	queueID         int32
	queue           string
	relation        string // table_oid::regclass, quoted as needed
	partitionColumn string
	maxAttempts     int
	backoffMin      time.Duration
	backoffMax      time.Duration
	permanentPolicy PermanentPolicy
	channel         string
}

// loadRegistration reads the queue's registration, or fails naming the queue when there is none.
func loadRegistration(ctx context.Context, db querier, table string) (registration, error) {
	var (
		r          registration
		partition  *string
		policy     string
		bmin, bmax time.Duration
	)
	err := db.QueryRow(ctx, `
		SELECT q.queue_id, q.queue, q.table_oid::regclass::text, q.partition_column, q.max_attempts,
		       q.backoff_min, q.backoff_max, q.permanent_policy, q.channel
		FROM outbox.queues q WHERE q.queue = $1`, table).
		Scan(&r.queueID, &r.queue, &r.relation, &partition, &r.maxAttempts, &bmin, &bmax, &policy, &r.channel)
	if errors.Is(err, pgx.ErrNoRows) {
		return r, fmt.Errorf("queue %s is not registered (call outbox.create_queue first)", table)
	}
	if err != nil {
		return r, fmt.Errorf("reading registration of queue %s: %w", table, err)
	}
	if partition != nil {
		r.partitionColumn = *partition
	}
	r.backoffMin, r.backoffMax = bmin, bmax
	switch policy {
	case "poison":
		r.permanentPolicy = PoisonPermanent
	case "retry":
		r.permanentPolicy = RetryPermanent
	default:
		return r, fmt.Errorf("queue %s has unknown permanent_policy %q", table, policy)
	}
	return r, nil
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
