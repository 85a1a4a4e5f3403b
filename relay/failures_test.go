package relay

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// captured is a slog.Handler that keeps every record, flattened to its level, message and
// attributes.
type captured struct {
	mu      sync.Mutex
	records []line
}

type line struct {
	level slog.Level
	msg   string
	attrs map[string]string
}

func (c *captured) Enabled(context.Context, slog.Level) bool { return true }
func (c *captured) WithAttrs([]slog.Attr) slog.Handler       { return c }
func (c *captured) WithGroup(string) slog.Handler            { return c }
func (c *captured) Handle(_ context.Context, r slog.Record) error {
	l := line{level: r.Level, msg: r.Message, attrs: map[string]string{}}
	r.Attrs(func(a slog.Attr) bool {
		l.attrs[a.Key] = a.Value.String()
		return true
	})
	c.mu.Lock()
	defer c.mu.Unlock()
	c.records = append(c.records, l)
	return nil
}

// take returns the records so far and forgets them.
func (c *captured) take() []line {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := c.records
	c.records = nil
	return out
}

// A key's transient failures are logged at once, then at most once per interval with how many
// failed since; a key failing for longer than WedgeWarnAfter is logged at Warn once, with its last
// error, however long it goes on; delivered again, it says so and starts afresh. Keys are counted
// apart, and on an unpartitioned queue each event is its own key.
func TestFailureLog_RateLimitsPerKeyAndWarnsOnceAboutAWedge(t *testing.T) {
	t.Parallel()
	h := &captured{}
	clock := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	l := newFailureLog(slog.New(h), time.Minute, 5*time.Minute)
	l.now = func() time.Time { return clock }
	ctx := context.Background()
	fail := func(key string, attempt int, msg string) {
		l.observe(ctx, Event{ID: 7, Identity: "e-" + key, PartitionKey: key, Attempts: attempt},
			TransientResult(errors.New(msg)))
	}

	fail("a", 0, "peer answered 503")
	fail("b", 0, "peer answered 502")
	got := h.take()
	require.Len(t, got, 2, "the first failure of each key is logged at once")
	require.Equal(t, slog.LevelInfo, got[0].level)
	require.Equal(t, "a", got[0].attrs["partition_key"])
	require.Equal(t, "peer answered 503", got[0].attrs["err"])
	require.Equal(t, "1", got[0].attrs["attempt"])
	require.Equal(t, "b", got[1].attrs["partition_key"])

	// 451 failures of key a in the next 10 minutes (the issue saw 451 and no line), one every ~1.3s: a line per minute, one Warn.
	for i := 1; i <= 451; i++ {
		clock = clock.Add(1330 * time.Millisecond)
		fail("a", i, fmt.Sprintf("peer answered 503 (try %d)", i))
	}
	got = h.take()
	var infos, warns []line
	for _, r := range got {
		switch r.level {
		case slog.LevelInfo:
			infos = append(infos, r)
		case slog.LevelWarn:
			warns = append(warns, r)
		}
	}
	require.Len(t, infos, 9, "one line per key per minute (the first was logged before)")
	require.Equal(t, "46", infos[0].attrs["failures"], "the failures since the last line are counted")
	require.Len(t, warns, 1, "the wedge is logged once")
	require.Equal(t, "a", warns[0].attrs["partition_key"])
	require.Equal(t, "5m1s", warns[0].attrs["failing_for"])
	require.Contains(t, warns[0].attrs["last_error"], "peer answered 503 (try 226)")
	require.Contains(t, warns[0].msg, "wedge_warn_after")

	// Delivered: said once, and the key starts afresh.
	l.observe(ctx, Event{ID: 8, PartitionKey: "a"}, SentResult())
	got = h.take()
	require.Len(t, got, 1)
	require.Equal(t, slog.LevelInfo, got[0].level)
	require.Equal(t, "a key that was failing is delivered again", got[0].msg)
	fail("a", 0, "peer answered 500")
	require.Len(t, h.take(), 1, "a new failure after a success is logged at once")

	// Key b failed once, long ago, and was never seen again: no warning; it is forgotten.
	require.Contains(t, l.keys, "b")
	clock = clock.Add(2 * time.Hour)
	fail("c", 0, "x")
	require.NotContains(t, l.keys, "b")

	// Unpartitioned: each event is its own key.
	l.observe(ctx, Event{ID: 9, Identity: "e-9"}, TransientResult(errors.New("x")))
	l.observe(ctx, Event{ID: 10, Identity: "e-10"}, TransientResult(errors.New("x")))
	got = h.take()
	require.Len(t, got, 3)
	require.Equal(t, "e-9", got[1].attrs["event_id"])
	require.Equal(t, "e-10", got[2].attrs["event_id"])

	// A permanent result is the drainer's to log; it clears the key.
	l.observe(ctx, Event{ID: 10, Identity: "e-10"}, PermanentResult(errors.New("x")))
	require.Empty(t, h.take())
	require.NotContains(t, l.keys, "\x00e-10")
}

// Negative settings turn either part off; the defaults are one minute and five minutes.
func TestFailureLog_SettingsAndDefaults(t *testing.T) {
	t.Parallel()
	r := Route{}.withDefaults()
	require.Equal(t, DefaultFailureLogInterval, r.FailureLogInterval)
	require.Equal(t, DefaultWedgeWarnAfter, r.WedgeWarnAfter)

	h := &captured{}
	clock := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	l := newFailureLog(slog.New(h), -1, time.Minute)
	l.now = func() time.Time { return clock }
	for range 100 {
		clock = clock.Add(time.Second)
		l.observe(context.Background(), Event{PartitionKey: "k"}, TransientResult(errors.New("x")))
	}
	got := h.take()
	require.Len(t, got, 1, "only the wedge warning")
	require.Equal(t, slog.LevelWarn, got[0].level)

	off := newFailureLog(slog.New(h), -1, -1)
	off.observe(context.Background(), Event{PartitionKey: "k"}, TransientResult(errors.New("x")))
	require.Empty(t, h.take())
	require.Empty(t, off.keys)
}

// Past maxFailingKeys keys, failures are counted, not tracked, and logged as one line per interval.
func TestFailureLog_TracksABoundedNumberOfKeys(t *testing.T) {
	t.Parallel()
	h := &captured{}
	clock := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	l := newFailureLog(slog.New(h), time.Minute, 5*time.Minute)
	l.now = func() time.Time { return clock }
	for i := range maxFailingKeys + 50 {
		l.observe(context.Background(), Event{PartitionKey: fmt.Sprint(i)}, TransientResult(errors.New("x")))
	}
	require.Len(t, l.keys, maxFailingKeys)
	got := h.take()
	require.Len(t, got, maxFailingKeys+1)
	require.Equal(t, slog.LevelWarn, got[maxFailingKeys].level)
	require.Equal(t, "1", got[maxFailingKeys].attrs["untracked_failures"])
}
