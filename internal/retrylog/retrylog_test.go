package retrylog

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A retry every 5 s (pgerr.BackoffMax) for ten minutes is logged at its level 3 times, then once a
// minute with the retries quieted since; after a quiet minute a new failure starts a new streak.
func TestRetryLog_FirstThreeThenOnceAMinute(t *testing.T) {
	var l Log
	start := time.Date(2026, 12, 7, 0, 0, 0, 0, time.UTC)
	var loud []time.Duration
	var quieted []int
	for at := time.Duration(0); at < 10*time.Minute; at += 5 * time.Second {
		if ok, q := l.Admit("claiming batch failed; retrying", start.Add(at)); ok {
			loud, quieted = append(loud, at), append(quieted, q)
		}
	}
	require.Equal(t, []time.Duration{0, 5 * time.Second, 10 * time.Second, 70 * time.Second, 130 * time.Second,
		190 * time.Second, 250 * time.Second, 310 * time.Second, 370 * time.Second, 430 * time.Second,
		490 * time.Second, 550 * time.Second}, loud)
	require.Equal(t, []int{0, 0, 0, 11, 11, 11, 11, 11, 11, 11, 11, 11}, quieted)

	ok, _ := l.Admit("starting failed; retrying", start.Add(10*time.Minute))
	require.True(t, ok, "another kind is counted on its own")

	later := start.Add(10*time.Minute + Every)
	for i := range First {
		ok, q := l.Admit("claiming batch failed; retrying", later.Add(time.Duration(i)*time.Second))
		require.True(t, ok, "a new streak after a quiet minute: retry %d", i)
		require.Zero(t, q, "the last streak's quieted retries are not carried into the new one")
	}
	ok, _ = l.Admit("claiming batch failed; retrying", later.Add(First*time.Second))
	require.False(t, ok)
}

// A success between failures ends their streak: the next failure is logged at its level.
func TestRetryLog_ResetStartsANewStreak(t *testing.T) {
	var l Log
	start := time.Date(2026, 12, 7, 0, 0, 0, 0, time.UTC)
	for i := range First {
		ok, _ := l.Admit("claiming batch failed; retrying", start.Add(time.Duration(i)*time.Second))
		require.True(t, ok)
	}
	ok, _ := l.Admit("claiming batch failed; retrying", start.Add(First*time.Second))
	require.False(t, ok, "the fourth in a row is quiet")
	l.Reset()
	ok, q := l.Admit("claiming batch failed; retrying", start.Add((First+1)*time.Second))
	require.True(t, ok, "after a success the next failure is loud")
	require.Zero(t, q)
}
