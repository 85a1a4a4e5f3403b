package relay

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/pgdrain/pgdrain/internal/errtext"
)

// Defaults of a route's failure log (Route.FailureLogInterval, Route.WedgeWarnAfter).
const (
	// DefaultFailureLogInterval logs a failing key at most once a minute.
	DefaultFailureLogInterval = time.Minute
	// DefaultWedgeWarnAfter warns about a key that has been failing for five minutes.
	DefaultWedgeWarnAfter = 5 * time.Minute
)

// Bounds of the failure log's memory: it tracks at most maxFailingKeys keys (failures of others
// are counted, not logged one by one), and forgets a key it has not seen fail for failingKeyTTL
// (another replica delivered it, or it is in a long backoff; it starts afresh when it fails again).
const (
	maxFailingKeys  = 10000
	failingKeyTTL   = time.Hour
	failingKeySweep = time.Minute
)

// failureLog logs a route's transient failures, rate-limited per key, and a key that keeps failing
// at Warn once: the relay's counterpart of the drainer's WedgeWarnAfter, measured from what this
// replica sees (no query). A key is the event's partition key, or on an unpartitioned queue the
// event itself (its event_id). Permanent failures are the drainer's to log (it logs every poisoned
// event at Warn).
type failureLog struct {
	logger     *slog.Logger
	every      time.Duration // <= 0: transient failures are not logged
	wedgeAfter time.Duration // <= 0: no wedge warning
	now        func() time.Time

	mu              sync.Mutex
	keys            map[string]*keyFailures
	untracked       int // failures of keys not tracked (too many) since the last line about them
	untrackedLogged time.Time
	swept           time.Time
}

// keyFailures is what the log knows of one failing key.
type keyFailures struct {
	first    time.Time // its first failure this replica saw (since it last succeeded)
	last     time.Time // its latest failure
	logged   time.Time // the last line about it
	failures int       // failures since that line
	total    int       // failures since first
	warned   bool      // the wedge warning was logged
}

func newFailureLog(logger *slog.Logger, every, wedgeAfter time.Duration) *failureLog {
	return &failureLog{logger: logger, every: every, wedgeAfter: wedgeAfter, now: time.Now, keys: map[string]*keyFailures{}}
}

// off reports whether the log has nothing to do.
func (l *failureLog) off() bool { return l.every <= 0 && l.wedgeAfter <= 0 }

// observe notes the result of one delivery of e and logs what is due.
func (l *failureLog) observe(ctx context.Context, e Event, res Result) {
	if l.off() {
		return
	}
	key, attr := e.PartitionKey, slog.String("partition_key", e.PartitionKey)
	if key == "" {
		key, attr = "\x00"+e.Identity, slog.String("event_id", e.Identity)
	}
	now := l.now()
	l.mu.Lock()
	k := l.keys[key]
	if res.Outcome != Transient {
		// Delivered or refused for good: the key moves on.
		delete(l.keys, key)
		l.mu.Unlock()
		if k != nil && k.warned && res.Outcome == Sent {
			l.logger.InfoContext(ctx, "a key that was failing is delivered again", attr, "id", e.ID,
				"failing_for", now.Sub(k.first).Round(time.Second), "failures", k.total)
		}
		return
	}
	if k == nil {
		l.sweep(now)
		if len(l.keys) >= maxFailingKeys {
			l.untracked++
			due := l.every > 0 && now.Sub(l.untrackedLogged) >= l.every
			n := l.untracked
			if due {
				l.untracked, l.untrackedLogged = 0, now
			}
			l.mu.Unlock()
			if due {
				l.logger.WarnContext(ctx, "deliveries are failing for more keys than the relay tracks; not logging each",
					"tracked_keys", maxFailingKeys, "untracked_failures", n, "last_error", errText(res.Err))
			}
			return
		}
		k = &keyFailures{first: now}
		l.keys[key] = k
	}
	k.last = now
	k.failures++
	k.total++
	logLine := l.every > 0 && (k.logged.IsZero() || now.Sub(k.logged) >= l.every)
	warn := l.wedgeAfter > 0 && !k.warned && now.Sub(k.first) >= l.wedgeAfter
	failures, total, failingFor := k.failures, k.total, now.Sub(k.first).Round(time.Second)
	if logLine {
		k.logged, k.failures = now, 0
	}
	if warn {
		k.warned = true
	}
	l.mu.Unlock()

	if logLine {
		attrs := []any{attr, "id", e.ID, "attempt", e.Attempts + 1, "err", errText(res.Err), "failures", failures,
			"failing_for", failingFor}
		if res.RetryAfter > 0 {
			attrs = append(attrs, "retry_after", res.RetryAfter)
		}
		l.logger.InfoContext(ctx, "delivery failed; retrying (logged at most once per key per failure_log_interval)", attrs...)
	}
	if warn {
		l.logger.WarnContext(ctx, "a key has been failing for longer than wedge_warn_after; its later events wait",
			attr, "id", e.ID, "failing_for", failingFor, "failures", total, "last_error", errText(res.Err))
	}
}

// sweep forgets the keys not seen failing for failingKeyTTL, at most once per failingKeySweep.
// Called with l.mu held.
func (l *failureLog) sweep(now time.Time) {
	if now.Sub(l.swept) < failingKeySweep {
		return
	}
	l.swept = now
	for key, k := range l.keys {
		if now.Sub(k.last) >= failingKeyTTL {
			delete(l.keys, key)
		}
	}
}

func errText(err error) string {
	if err == nil {
		return ""
	}
	return errtext.Recordable(err.Error(), errtext.LogBytes)
}
