package drainer

import (
	"context"
	"sync/atomic"
	"time"
)

// A queue that notifies 'when_waiting' (outbox.set_notify) has its producers NOTIFY only while a
// drainer says it waits for one: NOTIFY serialises the commits of every producer that sends one,
// and a drainer that is busy does not need it. Before it sleeps, a drainer marks itself waiting
// (outbox.drainer_waits) and claims once more (rows that committed before the mark sent no NOTIFY);
// a NOTIFY that wakes it clears the mark (outbox.drainer_woke) unless another drainer marked itself
// since. On a queue that notifies always, the mark is 0 and nothing else happens.

const (
	// gateRetryMin and gateRetryMax bound the pause before claiming again when producers held the
	// queue's notify gate, so the drainer could not mark itself waiting: rows of theirs may be
	// committing that no NOTIFY will announce.
	gateRetryMin = 10 * time.Millisecond
	gateRetryMax = 200 * time.Millisecond
	// markSlack is added to the wait a mark covers, so the mark outlives the sleep it announces.
	markSlack = time.Second
	// busyPollMin and busyPollMax bound the pause between claims while the drainer busy-polls
	// (Config.BusyPoll): it grows with the time since the last rows were found.
	busyPollMin = time.Millisecond
	busyPollMax = 10 * time.Millisecond
)

// busyPoll is how long to pause before claiming again while rows were found less than BusyPoll ago
// (no mark, no NOTIFY asked for), or 0 when the drainer should wait as usual.
func (r *runner[T]) busyPoll() time.Duration {
	idle := time.Since(r.lastFound)
	if r.cfg.BusyPoll <= 0 || idle >= r.cfg.BusyPoll {
		return 0
	}
	return min(max(idle, busyPollMin), busyPollMax, r.cfg.BusyPoll-idle)
}

// waiting is what this runner told the queue about its waiting.
type waiting struct {
	mark      int64     // the mark producers see (0: none, or the queue notifies always)
	until     time.Time // local time the mark covers at least until
	gateDelay time.Duration
	heard     atomic.Bool // a NOTIFY arrived, set by the listener
	// The LISTEN connection was made again: NOTIFYs were missed, maybe one after which another
	// drainer cleared the mark. Mark again before the next sleep.
	reconnected atomic.Bool
}

// listenWake is the runner's LISTEN callback: wake the claimer, and remember whether a NOTIFY did.
func (r *runner[T]) listenWake(notified bool) {
	if notified {
		r.waiting.heard.Store(true)
	} else {
		r.waiting.reconnected.Store(true)
	}
	r.signal()
}

// markWaiting is how long to sleep for wait, once producers know this drainer waits: 0 right after
// marking (claim once more first), a short pause when producers held the notify gate, else wait.
// A PollOnly drainer hears no NOTIFY, so it never asks for one.
func (r *runner[T]) markWaiting(ctx context.Context, wait time.Duration) time.Duration {
	w := &r.waiting
	if r.cfg.PollOnly {
		return wait
	}
	now := time.Now()
	// Marked (or told the queue notifies always) for longer than this sleep: nothing to say.
	if now.Add(wait).Before(w.until) {
		return wait
	}
	cctx, cancel := r.bounded(ctx)
	mark, err := queryDrainerWaits(cctx, r.d.db, r.reg.queue, wait+markSlack)
	cancel()
	switch {
	case err != nil:
		if ctx.Err() == nil {
			r.d.logger.WarnContext(ctx, "marking the drainer as waiting for a NOTIFY failed; claiming again soon",
				"err", err, "retry_in", gateRetryMax)
		}
		return min(wait, gateRetryMax)
	case mark == nil:
		w.gateDelay = min(max(2*w.gateDelay, gateRetryMin), gateRetryMax)
		return min(wait, w.gateDelay)
	case *mark == 0:
		// Asked again after this sleep: a switch to 'when_waiting' takes effect within one.
		w.mark, w.until = 0, now.Add(wait)
		return wait
	}
	w.mark, w.until, w.gateDelay = *mark, now.Add(wait+markSlack), 0
	return 0
}

// woke clears this drainer's mark when a NOTIFY woke it (every drainer listening on the channel
// got the same one): producers stop notifying until a drainer waits again. A wake-up of another
// kind (results recorded, a reconnection) leaves the mark to expire.
func (r *runner[T]) woke(ctx context.Context) {
	w := &r.waiting
	if w.reconnected.Swap(false) {
		w.mark, w.until = 0, time.Time{}
	}
	if !w.heard.Swap(false) || w.mark == 0 {
		return
	}
	mark := w.mark
	w.mark, w.until = 0, time.Time{}
	cctx, cancel := r.bounded(ctx)
	defer cancel()
	if err := queryDrainerWoke(cctx, r.d.db, r.reg.queue, mark); err != nil && ctx.Err() == nil {
		r.d.logger.DebugContext(ctx, "clearing the drainer's waiting mark failed; it expires by itself", "err", err)
	}
}
