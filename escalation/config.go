package escalation

import (
	"cmp"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Defaults and limits of Config. A zero field takes its default.
const (
	// DefaultBatchSize is how many due steps one take leases: alr.take_due_steps' default.
	DefaultBatchSize = 100
	// MaxBatchSize is the largest batch alr.take_due_steps accepts.
	MaxBatchSize = 10000
	// DefaultLease is how long a taken step stays hidden from other engines: the seed's 2 minutes.
	DefaultLease = 2 * time.Minute
	// MinLease is the shortest Lease Validate accepts.
	MinLease = time.Millisecond
	// MaxLease is the longest lease alr.take_due_steps accepts.
	MaxLease = 24 * time.Hour
	// DefaultTick is the pause between takes when the previous one was not full.
	DefaultTick = time.Second
	// DefaultStepTimeout bounds one delivery (one network call of one channel).
	DefaultStepTimeout = 10 * time.Second
	// DefaultDBTimeout bounds one SQL call of the engine.
	DefaultDBTimeout = 5 * time.Second
)

// Config tunes an Engine. The zero value is valid: every zero field takes its default, and
// Validate (which New calls) applies the defaults before it checks. A negative duration or size is
// an error, never a default.
type Config struct {
	// BatchSize is how many due steps one take leases. Must be between 1 and MaxBatchSize.
	// Defaults to 100 (DefaultBatchSize).
	BatchSize int
	// Lease is how long a taken step is hidden from other engines; a batch may take longer (the
	// token, not the lease, prevents double delivery), so keep it short: a crashed engine holds
	// its steps this long. Must be between MinLease and MaxLease. Defaults to 2 minutes
	// (DefaultLease).
	Lease time.Duration
	// Tick is the pause between takes when the last take was not full. Must be positive.
	// Defaults to 1s (DefaultTick).
	Tick time.Duration
	// StepTimeout bounds each delivery, so one hanging channel delays a batch by at most this much
	// (plus OverrunGrace for a Notifier that ignores its context; see Notifier). Must be positive.
	// Defaults to 10s (DefaultStepTimeout).
	StepTimeout time.Duration
	// DBTimeout bounds each SQL call. Must be positive. Defaults to 5s (DefaultDBTimeout).
	DBTimeout time.Duration
	// Logger receives the engine's logs. Defaults to slog.Default().
	Logger *slog.Logger
	// Registerer, when set, gets the engine's metrics (New registers them):
	// pgdrain_escalation_steps_total{outcome} and pgdrain_escalation_unserved_steps_total{channel}
	// (steps given back because no Notifier serves their channel), and
	// pgdrain_escalation_unserved_channels (channels the policies use that no Notifier serves, as of
	// the last check), pgdrain_escalation_overrunning_deliveries (Notifier calls given up on
	// that still run; see Notifier) and pgdrain_escalation_unjournaled_steps (steps recorded and
	// never journaled: an engine killed between recording and delivering them; Run asks every
	// minute). Defaults to nil: counted, not exported.
	Registerer prometheus.Registerer
}

// withDefaults returns c with every zero field set to its default.
func (c Config) withDefaults() Config {
	c.BatchSize = cmp.Or(c.BatchSize, DefaultBatchSize)
	c.Lease = cmp.Or(c.Lease, DefaultLease)
	c.Tick = cmp.Or(c.Tick, DefaultTick)
	c.StepTimeout = cmp.Or(c.StepTimeout, DefaultStepTimeout)
	c.DBTimeout = cmp.Or(c.DBTimeout, DefaultDBTimeout)
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c
}

// Validate reports every problem of c (after defaults), one line each, every line starting with
// the field name. It needs no database.
func (c Config) Validate() error {
	c = c.withDefaults()
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if c.BatchSize < 1 || c.BatchSize > MaxBatchSize {
		bad("BatchSize must be between 1 and %d, got %d", MaxBatchSize, c.BatchSize)
	}
	if c.Lease < MinLease || c.Lease > MaxLease {
		bad("Lease must be between %s and %s, got %s", MinLease, MaxLease, c.Lease)
	}
	if c.Tick <= 0 {
		bad("Tick must be positive, got %s", c.Tick)
	}
	if c.StepTimeout <= 0 {
		bad("StepTimeout must be positive, got %s", c.StepTimeout)
	}
	if c.DBTimeout <= 0 {
		bad("DBTimeout must be positive, got %s", c.DBTimeout)
	}
	return errors.Join(errs...)
}
