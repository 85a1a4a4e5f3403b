package drainer

import (
	"sync"
	"time"
)

// A failure that repeats is logged at its level for the first retryLogFirst retries, then at most
// once per retryLogEvery, with how many retries were logged only at Debug since: a long outage
// logged a line per retry (every 5 s at most, per queue and call site) until it ended.
const (
	retryLogFirst = 3
	retryLogEvery = time.Minute
)

// retryLog decides which retries of each kind (its message) are logged at their level.
type retryLog struct {
	mu    sync.Mutex
	kinds map[string]*retryKind
}

type retryKind struct {
	seen    time.Time // the last retry of the kind
	loud    time.Time // the last one logged at its level
	streak  int       // retries logged at their level since the streak began
	quieted int       // retries since loud, logged only at Debug
}

// admit reports whether a retry of kind msg at now is logged at its level, and how many retries of
// the kind were logged only at Debug since the last one that was. A kind with no retry for
// retryLogEvery starts a new streak (its retries come at most pgerr.BackoffMax apart).
func (l *retryLog) admit(msg string, now time.Time) (loud bool, quieted int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.kinds == nil {
		l.kinds = map[string]*retryKind{}
	}
	k := l.kinds[msg]
	if k == nil || now.Sub(k.seen) >= retryLogEvery {
		k = &retryKind{}
		l.kinds[msg] = k
	}
	k.seen = now
	if k.streak >= retryLogFirst && now.Sub(k.loud) < retryLogEvery {
		k.quieted++
		return false, 0
	}
	k.streak++
	k.loud = now
	quieted, k.quieted = k.quieted, 0
	return true, quieted
}
