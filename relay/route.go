package relay

import (
	"cmp"
	"errors"
	"fmt"
	"regexp"
	"time"

	"github.com/pgdrain/pgdrain/drainer"
)

// Defaults and limits of a Route. A zero field takes its default.
const (
	// DefaultBatchSize delivers one event per Deliver call.
	DefaultBatchSize = 1
	// DefaultBatchLinger is how long a batch that is not full waits for more events applied at the
	// same time before it is delivered.
	DefaultBatchLinger = 5 * time.Millisecond
	// MaxBatchLinger bounds BatchLinger: every event of a batch waits for it.
	MaxBatchLinger = time.Second
)

var sinkNamePattern = regexp.MustCompile(`^[a-z][a-z0-9_]{0,62}$`)

// Route relays one queue to one sink.
type Route struct {
	// Queue is the queue table ("schema.table"), as registered with outbox.create_queue. Required.
	Queue string
	// Sink delivers the queue's events. Required.
	Sink Sink
	// SinkKind names the sink in metrics and logs ("webhook", "kafka", "jetstream", or yours:
	// lower case letters, digits, _). Required.
	SinkKind string
	// Drainer configures the queue's drainer: claim mode, ApplyConcurrency (how many events are
	// in flight at once), ApplyTimeout (each Deliver's deadline), Lease, LockTransactionTimeout,
	// PollFallback. Its Table is set to Queue.
	Drainer drainer.Config
	// BatchSize is how many events one Deliver call gets at most: events applied at the same time
	// are grouped, so it must not exceed Drainer.ApplyConcurrency. Defaults to 1
	// (DefaultBatchSize).
	BatchSize int
	// BatchLinger is how long a batch that is not full waits for more events. A batch whose events
	// the drainer started together with no others (the rows of one claim, in free slots) leaves as
	// soon as the last of them has arrived: nothing else comes until the drainer claims again. So
	// the linger is only waited for by events applied after another in their slot (the rest of a
	// partition's run, RunLength above 1, or rows waiting for a slot). Only used when BatchSize is
	// above 1. Defaults to 5ms (DefaultBatchLinger).
	BatchLinger time.Duration
	// FailureLogInterval is how often a key's transient failures are logged (at Info), at most: its
	// first failure at once, then one line per interval with its last error and how many failed
	// since. A key is the event's partition key, or on an unpartitioned queue the event. Negative:
	// off. Defaults to 1m (DefaultFailureLogInterval).
	FailureLogInterval time.Duration
	// WedgeWarnAfter logs a key whose deliveries have failed for longer than this at Warn, once
	// (until it is delivered or refused for good), with its last error: its later events wait
	// behind it. Each replica measures from the key's first failure it saw. It is the relay's
	// counterpart of drainer.Config.WedgeWarnAfter, which queries the queue and needs a wedge
	// observer; leave that one zero. Negative: off. Defaults to 5m (DefaultWedgeWarnAfter).
	WedgeWarnAfter time.Duration
}

func (r Route) withDefaults() Route {
	r.Drainer.Table = cmp.Or(r.Drainer.Table, r.Queue)
	r.BatchSize = cmp.Or(r.BatchSize, DefaultBatchSize)
	r.BatchLinger = cmp.Or(r.BatchLinger, DefaultBatchLinger)
	r.FailureLogInterval = cmp.Or(r.FailureLogInterval, DefaultFailureLogInterval)
	r.WedgeWarnAfter = cmp.Or(r.WedgeWarnAfter, DefaultWedgeWarnAfter)
	return r
}

// Validate reports every problem of r (after defaults), one line each, each starting with the
// field name; the drainer's own problems are prefixed with "Drainer.".
func (r Route) Validate() error {
	r = r.withDefaults()
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if r.Queue == "" {
		bad("Queue must be set to the queue table (\"schema.table\")")
	}
	if r.Drainer.Table != r.Queue {
		bad("Drainer.Table must be empty or equal to Queue (%q), got %q", r.Queue, r.Drainer.Table)
	}
	if r.Sink == nil {
		bad("Sink must be set")
	}
	if !sinkNamePattern.MatchString(r.SinkKind) {
		bad("SinkKind must be a lower-case name (letters, digits, _), got %q", r.SinkKind)
	}
	concurrency := cmp.Or(r.Drainer.ApplyConcurrency, drainer.DefaultApplyConcurrency)
	if r.BatchSize < 1 || r.BatchSize > concurrency {
		bad("BatchSize must be between 1 and Drainer.ApplyConcurrency (%d): a batch groups events applied at the same time, got %d",
			concurrency, r.BatchSize)
	}
	if r.BatchLinger < 0 || r.BatchLinger > MaxBatchLinger {
		bad("BatchLinger must be between 0 and %s, got %s", MaxBatchLinger, r.BatchLinger)
	}
	if r.Queue != "" {
		if err := r.Drainer.Validate(); err != nil {
			for _, line := range splitLines(err) {
				bad("Drainer.%s", line)
			}
		}
	}
	return errors.Join(errs...)
}
