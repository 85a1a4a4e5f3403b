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

// mismatchError is one Expect field that the registration contradicts.
type mismatchError struct{ msg string }

func (e *mismatchError) Error() string { return e.msg }

func (e *mismatchError) Is(target error) bool { return target == ErrRegistrationMismatch }

// checkExpectations reports every Expect field of c that r contradicts, one error each, each
// starting with the field name and matching ErrRegistrationMismatch.
func checkExpectations(c Config, r registration) error {
	var errs []error
	mismatch := func(field string, want, registered any, column string) {
		errs = append(errs, &mismatchError{fmt.Sprintf(
			"%s is %v but queue %s is registered with %s %v: the SQL functions apply the registration; "+
				"change the queue with outbox.create_queue (as its owner or pgdrain_operator) or the expectation",
			field, want, r.queue, column, registered)})
	}
	if c.ExpectMaxAttempts != 0 && c.ExpectMaxAttempts != r.maxAttempts {
		mismatch("ExpectMaxAttempts", c.ExpectMaxAttempts, r.maxAttempts, "max_attempts")
	}
	if c.ExpectBackoffMin != 0 && c.ExpectBackoffMin != r.backoffMin {
		mismatch("ExpectBackoffMin", c.ExpectBackoffMin, r.backoffMin, "backoff_min")
	}
	if c.ExpectBackoffMax != 0 && c.ExpectBackoffMax != r.backoffMax {
		mismatch("ExpectBackoffMax", c.ExpectBackoffMax, r.backoffMax, "backoff_max")
	}
	if c.ExpectPermanentPolicy != 0 && c.ExpectPermanentPolicy != r.permanentPolicy {
		mismatch("ExpectPermanentPolicy", c.ExpectPermanentPolicy, r.permanentPolicy, "permanent_policy")
	}
	if c.ExpectPartitionColumn != "" && !strings.EqualFold(c.ExpectPartitionColumn, r.partitionColumn) {
		mismatch("ExpectPartitionColumn", quoteOrNone(c.ExpectPartitionColumn), quoteOrNone(r.partitionColumn), "partition_column")
	}
	if c.ExpectChannel != "" && !strings.EqualFold(c.ExpectChannel, r.channel) {
		mismatch("ExpectChannel", quoteOrNone(c.ExpectChannel), quoteOrNone(r.channel), "channel")
	}
	return errors.Join(errs...)
}

func quoteOrNone(s string) string {
	if s == "" {
		return "none"
	}
	return fmt.Sprintf("%q", s)
}
