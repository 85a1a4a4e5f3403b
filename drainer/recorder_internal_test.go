package drainer

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A flush carries at most maxResultsPerFlush results (apply_results refuses more ids than a claim
// may take, and the drainer then recorded the whole batch row by row); the rest stay pending, still
// indexed by id (a row claimed again replaces its earlier result), and are due at once.
func TestRecorder_FlushTakesAtMostTheCallLimit(t *testing.T) {
	rec := &recorder[struct{}]{index: map[int64]int{}, since: time.Now()}
	const n = maxResultsPerFlush + 7
	for id := range int64(n) {
		rec.index[id] = len(rec.pending)
		rec.pending = append(rec.pending, &job{event: Event{ID: id}})
	}

	first := rec.takeLocked()
	require.Len(t, first, maxResultsPerFlush)
	require.EqualValues(t, 0, first[0].event.ID)
	require.Equal(t, n, rec.backlog(), "taken results count as not yet recorded until the flush ends")
	require.Len(t, rec.pending, 7)
	for i, j := range rec.pending {
		require.Equal(t, i, rec.index[j.event.ID], "index of pending id %d", j.event.ID)
	}
	require.Len(t, rec.index, 7)
	require.True(t, rec.since.IsZero(), "the results left behind are due at once")

	rec.flushing = 0
	rest := rec.takeLocked()
	require.Len(t, rest, 7)
	require.EqualValues(t, maxResultsPerFlush, rest[0].event.ID)
	require.Empty(t, rec.pending)
	require.Empty(t, rec.index)
}

// A run's results go in one flush (apply_results can refuse a run's later rows only when it sees
// the run whole): the call limit never cuts between two rows of one run, and add queues a run's
// results together, so a flush never takes part of one.
func TestRecorder_AFlushTakesARunWhole(t *testing.T) {
	rec := &recorder[struct{}]{index: map[int64]int{}, since: time.Now(), kick: make(chan struct{}, 1)}
	for id := range int64(maxResultsPerFlush - 2) {
		rec.add(&job{event: Event{ID: id}})
	}
	run := []*job{{event: Event{ID: 1_000_000}}, {event: Event{ID: 1_000_001}}, {event: Event{ID: 1_000_002}}, {event: Event{ID: 1_000_003}}}
	for i := range len(run) - 1 {
		run[i].next = run[i+1]
	}
	rec.add(run...)
	require.Len(t, rec.pending, maxResultsPerFlush+2)

	first := rec.takeLocked()
	require.Len(t, first, maxResultsPerFlush-2, "the run that straddles the limit waits for the next flush, whole")
	rec.flushing = 0
	rest := rec.takeLocked()
	require.Equal(t, run, rest)
}
