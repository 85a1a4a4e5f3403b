package drainer

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
)

// maxClaimBound is the longest a claim is given once claims in a row got no answer from a server
// that still answers pings (claimAnswered).
const maxClaimBound = 10 * time.Minute

// claimBounded returns ctx bounded for one claim (BEGIN and the claim, in lock mode): ClaimTimeout,
// or longer after claims that the server was too busy to answer in time (claimAnswered).
func (r *runner[T]) claimBounded(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, max(time.Duration(r.claimBound.Load()), r.cfg.ClaimTimeout))
}

// claimAnswered adjusts the next claim's bound after a claim that ended with err. A claim that got
// no answer within its bound from a server that answers a ping at once was not lost: it was slow.
// The first claim after a crash or a promotion rebuilds the partition heads in one statement (one
// pass over the pending rows: about half a minute at four million rows), and cut off it rolls back:
// every attempt at ClaimTimeout did the same, and the queue stayed stuck. So the bound doubles, up
// to maxClaimBound, for as long as that goes on, and goes back to ClaimTimeout after a claim that
// answered. A server that does not answer the ping either (a host gone, a partition) keeps
// ClaimTimeout: that is what the bound is for.
func (r *runner[T]) claimAnswered(ctx context.Context, err error) {
	bound := max(time.Duration(r.claimBound.Load()), r.cfg.ClaimTimeout)
	if err == nil || ctx.Err() != nil || !(pgconn.Timeout(err) || errors.Is(err, context.DeadlineExceeded)) {
		r.claimBound.Store(int64(r.cfg.ClaimTimeout))
		return
	}
	pctx, cancel := context.WithTimeout(ctx, min(max(r.cfg.ClaimTimeout, time.Second), 5*time.Second))
	defer cancel()
	if r.d.pool.Ping(pctx) != nil {
		r.claimBound.Store(int64(r.cfg.ClaimTimeout))
		return
	}
	next := min(2*bound, maxClaimBound)
	r.claimBound.Store(int64(next))
	r.d.logger.WarnContext(ctx, "a claim got no answer within its bound although the server answers: it is busy with the "+
		"claim (the first claim after a crash or a promotion rebuilds the partition heads in one statement, one pass "+
		"over the pending rows); the next claim is given longer", "bound", bound, "next_bound", next)
}
