package drainer

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
)

// trickle paces claims while rows trickle in (Config.TrickleInterval). Only the claiming
// goroutine of a runner touches it.
type trickle struct {
	next    time.Time           // no claim before then (zero: claim when woken)
	keys    map[string]struct{} // the partitions the last claim found rows of
	since   time.Time           // when the last claim with rows started, on the server's clock
	noTurns bool                // the schema has no outbox.claim_turn: pace alone
}

// claimed notes a claim that started at start, asked for asked rows and found jobs: a full claim
// that found a row older than the last claim with rows (a backlog: rows were left behind), or a
// claim that found a partition the last claim with rows found too (rows wait behind that head), is
// followed at once; any other claim with rows no sooner than TrickleInterval after start. A full
// claim of rows that all arrived since the last one is a trickle that filled the claim: claimed
// again at once, it found a row or two (with ApplyConcurrency 8 at 400 rows/s, the claims and
// results were half as many again). An empty claim changes nothing: the pause of the last claim
// with rows still holds (replicas that find each other's rows taken do not poll the queue between
// them), and what it found is still what the next claim is compared with (an empty claim between
// a busy partition's rows, before its head's result was recorded, does not make the next row
// wait).
func (r *runner[T]) claimed(start time.Time, jobs []*job, asked int) {
	t := &r.trickle
	if r.cfg.TrickleInterval <= 0 || len(jobs) == 0 {
		return
	}
	busy := len(jobs) >= asked && t.leftBehind(jobs)
	t.since = jobs[0].claimStart
	keys := make(map[string]struct{}, len(jobs))
	for _, j := range jobs {
		if k := j.event.PartitionKey; k != "" {
			if _, again := t.keys[k]; again {
				busy = true
			}
			keys[k] = struct{}{}
		}
	}
	t.keys = keys
	t.next = time.Time{}
	if !busy {
		t.next = start.Add(r.cfg.TrickleInterval)
	}
}

// leftBehind reports whether a full claim found a row that was there before the last claim with
// rows started (or whether there was none to compare with): the queue has a backlog. Both times
// are the server's (created_at is usually the producer's now()); a row written in a transaction
// that began before that claim and committed after it counts as left behind, which only claims
// again at once, as before. So does a row created after this claim started: its created_at was
// set by a clock that is not the server's (an application's, ahead of it), and says nothing.
func (t *trickle) leftBehind(jobs []*job) bool {
	if t.since.IsZero() {
		return true
	}
	for _, j := range jobs {
		if j.event.CreatedAt.Before(t.since) || j.event.CreatedAt.After(j.claimStart) {
			return true
		}
	}
	return false
}

// paced is how long the next claim must wait (0: claim now). Once this drainer's own pause is
// over, and while its last claim with rows was paced, it takes the queue's claim turn
// (outbox.claim_turn), shared with every drainer of the queue: replicas that each paced alone
// claimed as many times as there were replicas, each claim finding a share of the rows, and the
// producers beside them paid for every claim (issue 29). A failed turn claims now.
func (r *runner[T]) paced(ctx context.Context) time.Duration {
	t := &r.trickle
	if t.next.IsZero() {
		return 0
	}
	if d := time.Until(t.next); d > 0 {
		return d
	}
	if t.noTurns {
		return 0
	}
	cctx, cancel := r.bounded(ctx)
	d, err := queryClaimTurn(cctx, r.d.db, r.reg.queue, r.cfg.TrickleInterval)
	cancel()
	if err != nil {
		var pgErr *pgconn.PgError
		// No such function (a schema before it), or no right to call it (a role granted the
		// worker's functions one by one): pace alone from now on rather than ask in vain.
		switch {
		case errors.As(err, &pgErr) && (pgErr.Code == "42883" || pgErr.Code == "42501"):
			t.noTurns = true
			r.d.logger.WarnContext(ctx, "outbox.claim_turn can not be called: this drainer paces its claims alone "+
				"(apply the migrations, or grant pgdrain_worker to the drainer's role)", "queue", r.reg.queue, "err", err)
		case ctx.Err() == nil:
			r.d.logger.DebugContext(ctx, "taking the claim turn failed; claiming now", "queue", r.reg.queue, "err", err)
		}
		return 0
	}
	if d <= 0 {
		return 0
	}
	// Not our turn: ask again when it may be (a slot freed meanwhile does not ask again).
	t.next = time.Now().Add(d)
	return d
}
