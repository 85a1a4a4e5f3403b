package console

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestRateOver_DeliveredIsInsertedMinusBacklogGrowth(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(s int, pending, poisoned, inserted int64) sample {
		return sample{at: t0.Add(time.Duration(s) * time.Second), inserted: inserted,
			stats: Stats{Pending: pending, Poisoned: poisoned}}
	}
	// Over 60s: 120 inserted, pending grew by 20 and 10 rows were poisoned out of pending (no
	// change to pending+poisoned), so 100 left the unsent set: sent.
	r := rateOver([]sample{at(0, 100, 0, 1000), at(30, 110, 5, 1060), at(60, 110, 10, 1120)}, time.Minute)
	require.True(t, r.OK)
	require.InDelta(t, 120, r.Enqueued, 0.001)
	require.InDelta(t, 100, r.Delivered, 0.001)
	require.Equal(t, time.Minute, r.Window)

	// A requeue moves rows from poisoned back to pending: not a delivery.
	r = rateOver([]sample{at(0, 100, 10, 1000), at(60, 110, 0, 1000)}, time.Minute)
	require.True(t, r.OK)
	require.Zero(t, r.Delivered)

	// A statistics reset (the counter went back): no figure rather than a wrong one.
	require.False(t, rateOver([]sample{at(0, 1, 0, 1000), at(60, 1, 0, 5)}, time.Minute).OK)
	require.False(t, rateOver([]sample{at(0, 1, 0, 1000)}, time.Minute).OK)
}

func TestConfig_ValidateNamesEveryBadField(t *testing.T) {
	err := Config{Refresh: time.Millisecond, WedgedAfter: -time.Second, BasicUser: "ops"}.Validate()
	require.Error(t, err)
	for _, want := range []string{"Reader must be set", "Refresh must be at least 1s", "WedgedAfter must not be negative", "BasicUser and BasicPassword"} {
		require.ErrorContains(t, err, want)
	}
}

// A queue is stalled while it has rows a claim could take in every sample and none was
// delivered; rows blocked behind wedged heads are not rows a claim could take, and a delivery (or a
// sample with nothing ready) ends the stall.
func TestStalledFor_ReadyRowsNothingDelivered(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(s int, pending, ready, blocked, inserted int64) sample {
		return sample{at: t0.Add(time.Duration(s) * time.Second), inserted: inserted, blocked: blocked,
			stats: Stats{Pending: pending, Ready: ready}}
	}
	require.Equal(t, 90*time.Second, stalledFor([]sample{at(0, 5, 5, 0, 100), at(30, 5, 5, 0, 100), at(90, 5, 5, 0, 100)}))
	// Producers keep writing, nothing leaves: still stalled.
	require.Equal(t, 60*time.Second, stalledFor([]sample{at(0, 5, 5, 0, 100), at(60, 15, 15, 0, 110)}))
	// One row delivered between the last two samples.
	require.Zero(t, stalledFor([]sample{at(0, 5, 5, 0, 100), at(30, 5, 5, 0, 100), at(60, 4, 4, 0, 100)}))
	// Delivered before the second sample only: stalled since it.
	require.Equal(t, 30*time.Second, stalledFor([]sample{at(0, 6, 6, 0, 100), at(30, 5, 5, 0, 100), at(60, 5, 5, 0, 100)}))
	// Every ready row is behind a wedged head: no claim could take one, not a stall.
	require.Zero(t, stalledFor([]sample{at(0, 5, 4, 4, 100), at(60, 5, 4, 4, 100)}))
	// Nothing ready in the first sample: stalled since the second.
	require.Equal(t, 30*time.Second, stalledFor([]sample{at(0, 5, 0, 0, 100), at(30, 5, 5, 0, 100), at(60, 5, 5, 0, 100)}))
	require.Zero(t, stalledFor([]sample{at(0, 5, 5, 0, 100)}))
}

// A sparkline has at most the points asked for, however many samples: each point is the
// throughput over its span of samples, so a steady rate stays a flat line at that rate.
func TestSparkline_AtMostMaxPointsEachTheRateOverItsSpan(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	samples := make([]sample, 900) // 15 minutes at a 1s refresh
	for i := range samples {
		samples[i] = sample{at: t0.Add(time.Duration(i) * time.Second), inserted: int64(i) * 2} // 120/min
	}
	points, peak := sparkline(samples, 60)
	require.Len(t, strings.Fields(points), 60)
	require.InDelta(t, 120, peak, 0.001)
	for _, p := range strings.Fields(points) {
		require.True(t, strings.HasSuffix(p, ",2"), "a flat line at the peak: %s", points)
	}
	require.True(t, strings.HasPrefix(points, "0,2 5,2 "), points)
	require.True(t, strings.HasSuffix(points, " 300,2"), points)
	// Fewer intervals than points: one point per interval, as before.
	points, _ = sparkline(samples[:4], 60)
	require.Len(t, strings.Fields(points), 3)
}
