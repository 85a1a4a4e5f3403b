package drainer

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A full claim counts as a backlog (claimed again at once) unless every row it found was created
// between the start of the drainer's last claim with rows and its own start, on the server's
// clock: rows older than that were left behind, and a row created after the claim started carries
// another clock's time (an application's, set ahead), which says nothing about the queue.
func TestTrickle_FullClaimIsABacklogUnlessEveryRowArrivedSinceTheLastClaim(t *testing.T) {
	last := time.Date(2026, 12, 5, 12, 0, 0, 0, time.UTC)
	now := last.Add(20 * time.Millisecond)
	claim := func(created ...time.Time) []*job {
		jobs := make([]*job, len(created))
		for i, c := range created {
			jobs[i] = &job{event: Event{CreatedAt: c}, claimStart: now}
		}
		return jobs
	}
	for _, c := range []struct {
		name    string
		since   time.Time
		jobs    []*job
		backlog bool
	}{
		{"no claim with rows before", time.Time{}, claim(now.Add(-time.Millisecond)), true},
		{"every row arrived since", last, claim(last, last.Add(5*time.Millisecond), now), false},
		{"a row older than the last claim", last, claim(last.Add(-time.Millisecond), now.Add(-time.Millisecond)), true},
		{"a row from a clock ahead of the server's", last, claim(last.Add(time.Millisecond), now.Add(time.Minute)), true},
	} {
		t.Run(c.name, func(t *testing.T) {
			tr := trickle{since: c.since}
			require.Equal(t, c.backlog, tr.leftBehind(c.jobs))
		})
	}
}
