package drainer

import (
	"cmp"
	"context"
	"sync"
	"time"

	"github.com/pgdrain/pgdrain/internal/pgerr"
)

// Health is what a drainer last saw of its database (Drainer.Health). A health check that pings
// the pool is not enough: a primary whose default_transaction_read_only is on, a standby a DSN
// reaches after a failover, or a revoked grant answers every ping and refuses every claim.
type Health struct {
	// LastClaim is when a claim (in lock mode, a batch) last succeeded; zero before the first.
	LastClaim time.Time
	// Err is why the last claim, batch or result flush failed; nil once one succeeds again.
	Err error
	// Cause says what Err means when the database is unavailable or refuses writes, as the Warn
	// lines' "cause" does: for a refused write, what the server says of itself (a standby, or
	// default_transaction_read_only = on and where it was set); "" otherwise.
	Cause string
}

// health is what Run records for Health.
type health struct {
	mu        sync.Mutex
	lastClaim time.Time
	err       error
	cause     string
}

// took records the outcome of one claim (claim true) or result flush. cause is what the server
// said of itself when err is a refused write, "" to keep what it said at the start of the streak.
// It reports whether err began a streak of refused writes.
func (h *health) took(at time.Time, claim bool, err error, cause string) (began bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	began = pgerr.ReadOnly(err) && !pgerr.ReadOnly(h.err)
	switch {
	case err == nil:
		h.cause = ""
		if claim {
			h.lastClaim = at
		}
	case !pgerr.ReadOnly(err):
		h.cause = cmp.Or(pgerr.Unavailable(err), pgerr.Conflict(err), pgerr.Cancelled(err))
	case cause != "":
		h.cause = cause
	case began:
		h.cause = pgerr.ReadOnlyCause
	}
	h.err = err
	return began
}

// refusing reports whether the last call was a refused write.
func (h *health) refusing() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return pgerr.ReadOnly(h.err)
}

func (h *health) reset() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.lastClaim, h.err, h.cause = time.Time{}, nil, ""
}

// Health reports when a claim last succeeded and why the last claim or result flush failed, if it
// did. A drainer whose Err is not nil is retrying with backoff and delivers nothing meanwhile.
func (d *Drainer[T]) Health() Health {
	d.health.mu.Lock()
	defer d.health.mu.Unlock()
	return Health{LastClaim: d.health.lastClaim, Err: d.health.err, Cause: d.health.cause}
}

// took records the outcome of a claim or a result flush for Health. Run's ctx ending is no
// failure. A refused write (SQLSTATE 25006) has the pool replace its connections, because a
// session keeps the default_transaction_read_only it began with: without new sessions a DBA's
// RESET went unseen until the pool retired them (MaxConnLifetime, an hour by default) and every
// retry failed the same way. The first refusal of a streak asks the server, through a new session,
// what it is (pgerr.WhyReadOnly) and logs that at Warn, once: the retries' own lines can only say
// "a standby or a read-only default".
func (r *runner[T]) took(ctx context.Context, at time.Time, claim bool, err error) {
	if err != nil && r.runCtx.Err() != nil {
		return
	}
	if err == nil {
		r.d.retries.Reset() // the next failure is the first of a new streak (logRetry)
	}
	if !pgerr.ReadOnly(err) {
		r.d.health.took(at, claim, err, "")
		return
	}
	r.d.pool.Reset()
	cause := ""
	if !r.d.health.refusing() {
		cctx, cancel := r.bounded(context.WithoutCancel(ctx))
		cause = pgerr.WhyReadOnly(cctx, r.d.pool)
		cancel()
	}
	if r.d.health.took(at, claim, err, cause) {
		r.d.logger.WarnContext(ctx, "the database refuses writes: claims and results fail until it accepts them; retrying with backoff",
			"cause", cmp.Or(cause, pgerr.ReadOnlyCause), "err", err)
	}
}
