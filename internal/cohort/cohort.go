// Package cohort tells a batching Applier (the relay's) which events a drainer started together,
// so that it can send them as soon as the last of them has arrived instead of waiting for a batch
// to fill or its linger to pass: nothing else is coming until the drainer claims again, and the
// drainer claims again when these slots free.
package cohort

import (
	"context"
	"sync/atomic"
)

// Cohort counts the members of one start that have not yet arrived. The drainer makes it with the
// number of applies it starts together and calls Done for a member it does not apply after all;
// the batching Applier calls Done when a member reaches its batch (or leaves without one).
type Cohort struct {
	left atomic.Int64
}

// New returns a cohort of n members.
func New(n int) *Cohort {
	c := &Cohort{}
	c.left.Store(int64(n))
	return c
}

// Done counts one member in (arrived, or never coming).
func (c *Cohort) Done() {
	c.left.Add(-1)
}

// Complete reports whether every member is in.
func (c *Cohort) Complete() bool {
	return c.left.Load() <= 0
}

type key struct{}

// With returns ctx carrying c.
func With(ctx context.Context, c *Cohort) context.Context {
	return context.WithValue(ctx, key{}, c)
}

// From returns the cohort ctx carries, or nil: an event applied alone, or by a drainer that does not
// say (its batch then waits for the linger).
func From(ctx context.Context) *Cohort {
	c, _ := ctx.Value(key{}).(*Cohort)
	return c
}
