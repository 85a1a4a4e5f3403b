package gocheck

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgdrain/pgdrain/drainer"
)

// foPeer is the failover check's remote side: every delivery of every queue, in the order the
// peer saw them, and when the first one after the promotion came.
type foPeer struct {
	mu       sync.Mutex
	promoted time.Time // zero until the standby is promoted
	queues   map[string]*foQueueLog
}

// foQueueLog is what one queue delivered.
type foQueueLog struct {
	times       map[int64]int            // id -> deliveries
	byKey       map[string][]foDelivery  // key -> deliveries in peer order
	seqs        map[string]map[int]int64 // key -> producer seq -> id
	firstAfter  time.Time                // first delivery after the promotion
	deliveredAt map[int64]time.Time
}

type foDelivery struct {
	id  int64
	seq int
}

func newFoPeer() *foPeer { return &foPeer{queues: map[string]*foQueueLog{}} }

func (p *foPeer) apply(_ context.Context, ev drainer.Event, e drEvent) {
	now := time.Now()
	p.mu.Lock()
	defer p.mu.Unlock()
	q := p.queues[ev.Table]
	if q == nil {
		q = &foQueueLog{times: map[int64]int{}, byKey: map[string][]foDelivery{}, seqs: map[string]map[int]int64{},
			deliveredAt: map[int64]time.Time{}}
		p.queues[ev.Table] = q
	}
	q.times[ev.ID]++
	q.byKey[ev.PartitionKey] = append(q.byKey[ev.PartitionKey], foDelivery{id: ev.ID, seq: e.Seq})
	if q.seqs[e.Key] == nil {
		q.seqs[e.Key] = map[int]int64{}
	}
	q.seqs[e.Key][e.Seq] = ev.ID
	if !p.promoted.IsZero() && q.firstAfter.IsZero() {
		q.firstAfter = now
	}
}

func (p *foPeer) markPromoted(at time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.promoted = at
}

// foFigures summarises one queue's deliveries.
type foFigures struct {
	delivered, duplicates int
	// violations are per-key order breaks: an id delivered after a larger one of its key (a
	// redelivery of the same id right after itself is a retry, not a break), or a producer's
	// later seq under a smaller id.
	violations []string
	reconnect  time.Duration // promotion -> first delivery after it
}

func (p *foPeer) figures(queue string) foFigures {
	p.mu.Lock()
	defer p.mu.Unlock()
	var f foFigures
	q := p.queues[queue]
	if q == nil {
		return f
	}
	for _, n := range q.times {
		f.delivered++
		f.duplicates += n - 1
	}
	for key, ds := range q.byKey {
		var maxID int64
		maxSeq := -1
		for _, d := range ds {
			switch {
			case d.id < maxID:
				f.violations = append(f.violations, fmt.Sprintf("key %s: id %d delivered after id %d", key, d.id, maxID))
			case d.id > maxID:
				if d.seq < maxSeq {
					f.violations = append(f.violations, fmt.Sprintf("key %s: seq %d (id %d) after seq %d", key, d.seq, d.id, maxSeq))
				}
				maxID, maxSeq = d.id, d.seq
			}
		}
	}
	sort.Strings(f.violations)
	if !q.firstAfter.IsZero() {
		f.reconnect = q.firstAfter.Sub(p.promoted)
	}
	return f
}

// deliveredSeq reports whether the producer's (key, seq) reached the peer.
func (p *foPeer) deliveredSeq(queue, key string, seq int) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	q := p.queues[queue]
	if q == nil {
		return false
	}
	_, ok := q.seqs[key][seq]
	return ok
}

func (p *foPeer) deliveredID(queue string, id int64) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	q := p.queues[queue]
	return q != nil && q.times[id] > 0
}

// foTally is a slog.Handler that counts what the drainers log, by level, message and SQLSTATE
// (of an "err" attribute), so the check can say which errors the failover caused, and how many.
type foTally struct {
	mu     sync.Mutex
	counts map[string]int
	attrs  []slog.Attr
}

func newFoTally() *foTally { return &foTally{counts: map[string]int{}} }

func (h *foTally) Enabled(context.Context, slog.Level) bool { return true }

func (h *foTally) Handle(_ context.Context, r slog.Record) error {
	// A retry that repeats is logged at Debug after its first three lines (drainer.logRetry): the
	// tally counts those too, so that it counts every failed call.
	if r.Level < slog.LevelWarn && !strings.Contains(r.Message, "retrying") {
		return nil
	}
	code := ""
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == "err" {
			code = foErrClass(a.Value.Any())
			if err, ok := a.Value.Any().(error); ok && r.Level >= slog.LevelError {
				code += fmt.Sprintf(" (%v)", err) // an unexpected error: say what it was
			}
		}
		return true
	})
	h.mu.Lock()
	h.counts[fmt.Sprintf("%s %q %s", r.Level, r.Message, code)]++
	h.mu.Unlock()
	return nil
}

func (h *foTally) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *foTally) WithGroup(string) slog.Handler      { return h }

// count returns how many records' keys contain every one of parts.
func (h *foTally) count(parts ...string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := 0
next:
	for k, c := range h.counts {
		for _, p := range parts {
			if !strings.Contains(k, p) {
				continue next
			}
		}
		n += c
	}
	return n
}

func (h *foTally) String() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	keys := make([]string, 0, len(h.counts))
	for k := range h.counts {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	for _, k := range keys {
		fmt.Fprintf(&b, "  %5d× %s\n", h.counts[k], k)
	}
	return b.String()
}

// foErrClass names an error for the tally: its SQLSTATE, or "conn" for a connection that could not
// be made or was lost.
func foErrClass(v any) string {
	err, ok := v.(error)
	if !ok {
		return ""
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return "SQLSTATE=" + pgErr.Code
	}
	var connErr *pgconn.ConnectError
	if errors.As(err, &connErr) || pgconn.SafeToRetry(err) || strings.Contains(err.Error(), "EOF") ||
		strings.Contains(err.Error(), "closed") || strings.Contains(err.Error(), "connection") {
		return "conn"
	}
	return "other"
}
