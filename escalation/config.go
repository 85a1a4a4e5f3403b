package escalation

import (
	"cmp"
	"fmt"
	"log/slog"
	"time"
)

const (
	// DefaultBatchSize is how many due steps one take leases: alr.take_due_steps' default.
	DefaultBatchSize = 100
	// MaxBatchSize is the largest batch alr.take_due_steps accepts.
	MaxBatchSize = 10000
	// DefaultLease is how long a taken step stays hidden from other engines: the seed's 2 minutes.
	DefaultLease = 2 * time.Minute
	// MaxLease is the longest lease alr.take_due_steps accepts.
	MaxLease = 24 * time.Hour
	// DefaultTick is the pause between takes when the previous one was not full.
	DefaultTick = time.Second
	// DefaultStepTimeout bounds one delivery (one network call of one channel).
	DefaultStepTimeout = 10 * time.Second
	// DefaultDBTimeout bounds one SQL call of the engine.
	DefaultDBTimeout = 5 * time.Second
)

// Config tunes an Engine. The zero value is valid: every field has a default.
type Config struct {
	// BatchSize is how many due steps one take leases. Defaults to 100 (DefaultBatchSize).
	BatchSize int
	// Lease is how long a taken step is hidden from other engines; a batch may take longer (the
	// token, not the lease, prevents double delivery), so keep it short: a crashed engine holds
	// its steps this long. Defaults to 2 minutes (DefaultLease).
	Lease time.Duration
	// Tick is the pause between takes when the last take was not full. Defaults to 1s (DefaultTick).
	Tick time.Duration
	// StepTimeout bounds each delivery, so one hanging channel delays a batch by at most this much.
	// Defaults to 10s (DefaultStepTimeout).
	StepTimeout time.Duration
	// DBTimeout bounds each SQL call. Defaults to 5s (DefaultDBTimeout).
	DBTimeout time.Duration
	// Logger receives the engine's logs. Defaults to slog.Default().
	Logger *slog.Logger
}

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

// Validate reports the first field out of range (after defaults are applied by New).
func (c Config) Validate() error {
	switch {
	case c.BatchSize < 1 || c.BatchSize > MaxBatchSize:
		return fmt.Errorf("BatchSize must be between 1 and %d, got %d", MaxBatchSize, c.BatchSize)
	case c.Lease < time.Millisecond || c.Lease > MaxLease:
		return fmt.Errorf("Lease must be between 1ms and %s, got %s", MaxLease, c.Lease)
	case c.Tick <= 0:
		return fmt.Errorf("Tick must be positive, got %s", c.Tick)
	case c.StepTimeout <= 0:
		return fmt.Errorf("StepTimeout must be positive, got %s", c.StepTimeout)
	case c.DBTimeout <= 0:
		return fmt.Errorf("DBTimeout must be positive, got %s", c.DBTimeout)
	}
	return nil
}
