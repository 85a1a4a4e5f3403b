package gocheck

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"
)

// Test_ClaimPlan_DoesNotScaleWithBacklogDepth is seed 001's regression: the cost of one claim must
// not follow the pending backlog (the seed measured 11.7 ms → 327 ms from 5k to 80k rows without
// the (attempt_count, id) index). Depths go to 320k, beyond the seed's; each queue keeps the seed's
// shape of about 6 rows per key and is freshly analyzed, for both kinds of queue.
func Test_ClaimPlan_DoesNotScaleWithBacklogDepth(t *testing.T) {
	t.Parallel()
	db := newPlanDB(t)
	for _, partitioned := range []bool{true, false} {
		base := healthyBaseline(t, db.Pool, partitioned)
		for _, depth := range []int{5_000, 20_000, 80_000, 320_000} {
			q := newQueue(t, db.Pool, fmt.Sprintf("public.depth_%d_%t", depth, partitioned), partitioned)
			fillInterleaved(t, db.Pool, q, depth, depth/rowsPerKey)
			analyze(t, db.Pool, q)
			// A fill whose commit step could not make its heads left wake notes, which the claims
			// measured then apply (a CI run: 13,333 notes, 8x the buffers; outbox 00050).
			t.Logf("depth %d (partitioned=%t): %d wake notes after the fill", depth, partitioned, wakeNotes(t, db.Pool))
			got := measureClaim(t, db.Pool, q, claimBatchSize)
			require.EqualValues(t, claimBatchSize, got.Rows, "a deep queue must fill a whole batch")
			requireFlat(t, fmt.Sprintf("depth %d (partitioned=%t)", depth, partitioned), got, base)
		}
	}
}
