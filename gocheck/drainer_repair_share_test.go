package gocheck

import (
	"context"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pgdrain/pgdrain/drainer"
)

// The repair pass walks every key with pending rows: with millions of them one pass took 28 s, and
// at the default RepairInterval of a minute it took half a core for as long as such a backlog
// lasted. A pass that took d is now followed by the next no sooner than ten times d after it
// started, whatever RepairInterval says. Here 30,000 keys whose rows are not due yet (the claims
// find nothing, the keys stay), RepairInterval at its minimum (100 ms, which before ran passes back
// to back): the gap between two passes' starts is at least ten times the first one's duration, as
// the drainer's log says and its timestamps show. Run as pgdrain_worker.
func TestDrainer_RepairPassTakesATenthOfTheTimeAtMost(t *testing.T) {
	t.Parallel()
	q := drNewQueue(t, drQueueOpts{partitionColumn: "partition_key"})
	exec(t, q.pool, `INSERT INTO public.events (event_type, payload, partition_key, next_attempt_at)
		SELECT 'op', jsonb_build_object('key', 'k' || g, 'op', 'op', 'seq', g), 'k' || g, now() + interval '1 hour'
		FROM generate_series(1, 30000) g`)
	exec(t, q.pool, `VACUUM ANALYZE public.events`)
	worker := loginPool(t, q.db, "pgdrain_worker")

	cfg := q.config(drainer.ClaimLease)
	cfg.RepairInterval = drainer.MinRepairInterval
	logger, buf := drCapture(t)
	d, _ := drNew(t, worker, cfg, func(context.Context, string, drEvent) error { return nil },
		drainer.WithLogger[drEvent](logger))
	stop := drStart(t, d)
	passDone := regexp.MustCompile(`time=(\S+) level=DEBUG msg="repair pass done" .*?took=(\S+) `)
	passes := func() [][]string { return passDone.FindAllStringSubmatch(buf.String(), -1) }
	drWaitFor(t, 60*time.Second, "three repair passes", func() bool { return len(passes()) >= 3 })
	require.NoError(t, stop())
	require.NotContains(t, buf.String(), "repair pass failed")

	type pass struct{ start, end time.Time }
	var seen []pass
	for _, m := range passes() {
		end, err := time.Parse(time.RFC3339Nano, m[1])
		require.NoError(t, err, m[0])
		took, err := time.ParseDuration(m[2])
		require.NoError(t, err, m[0])
		seen = append(seen, pass{start: end.Add(-took), end: end})
	}
	for i := 1; i < len(seen); i++ {
		took := seen[i-1].end.Sub(seen[i-1].start)
		require.Greater(t, took, 5*time.Millisecond, "a pass over 30,000 keys does some work")
		gap := seen[i].start.Sub(seen[i-1].start)
		// The log's clock and the drainer's took differ by the time between them: a millisecond.
		require.GreaterOrEqual(t, gap+time.Millisecond, 10*took,
			"pass %d started %s after pass %d, which took %s:\n%s", i+1, gap, i, took, strings.Join(passLines(buf.String()), "\n"))
	}
}

// passLines are the log's lines about repair passes.
func passLines(log string) []string {
	var out []string
	for _, l := range strings.Split(log, "\n") {
		if strings.Contains(l, "repair pass") {
			out = append(out, l)
		}
	}
	return out
}
