// Package retrylog decides which retries of a failing call are logged at their level: the first
// few in a row, then one a minute, so that a long outage is a few lines, not one per retry.
package retrylog

import (
	"sync"
	"time"
)

// A failure that repeats is logged at its level for the first First retries, then at most once
// per Every, with how many retries were logged only at Debug since: a long outage logged a line
// per retry (every 5 s at most, per queue and call site) until it ended.
const (
	First = 3
	Every = time.Minute
)

// Log decides which retries of each kind (its message, with its SQLSTATE when the caller adds it)
// are logged at their level. The zero Log
// is ready to use; it is safe for concurrent use.
type Log struct {
	mu    sync.Mutex
	kinds map[string]*retryKind
}

type retryKind struct {
	seen    time.Time // the last retry of the kind
	loud    time.Time // the last one logged at its level
	streak  int       // retries logged at their level since the streak began
	quieted int       // retries since loud, logged only at Debug
}

// Admit reports whether a retry of kind msg at now is logged at its level, and how many retries of
// the kind were logged only at Debug since the last one that was. A kind with no retry for
// Every starts a new streak (its retries come at most pgerr.BackoffMax apart).
func (l *Log) Admit(msg string, now time.Time) (loud bool, quieted int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.kinds == nil {
		l.kinds = map[string]*retryKind{}
	}
	k := l.kinds[msg]
	if k == nil || now.Sub(k.seen) >= Every {
		k = &retryKind{}
		l.kinds[msg] = k
	}
	k.seen = now
	if k.streak >= First && now.Sub(k.loud) < Every {
		k.quieted++
		return false, 0
	}
	k.streak++
	k.loud = now
	quieted, k.quieted = k.quieted, 0
	return true, quieted
}

// Reset forgets every streak: the call succeeded, so its next failure is the first of a new one.
func (l *Log) Reset() {
	l.mu.Lock()
	defer l.mu.Unlock()
	clear(l.kinds)
}
