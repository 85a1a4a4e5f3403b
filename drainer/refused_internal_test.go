package drainer

import (
	"context"
	"errors"
	"log/slog"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"
)

// Recorded row by row (a batch refused with a data exception), a run is recorded up to its first
// row that is not recorded, as one apply_results call refuses it: a row whose lease was lost, or
// whose result the server refused even escaped, leaves the rest of its run unrecorded (delivered
// again after it), while another key's row is recorded as usual.
func TestRecordEach_ARunStopsAtItsFirstRowNotRecorded(t *testing.T) {
	r := &runner[struct{}]{d: &Drainer[struct{}]{logger: slog.New(slog.DiscardHandler)}}
	keyed := func(id int64) *job { return &job{event: Event{ID: id, PartitionKey: "k"}} }
	lost, afterLost, refused, afterRefused, lastOfRun, single := keyed(1), keyed(2), keyed(3), keyed(4), keyed(5), keyed(6)
	lost.next = afterLost
	refused.next = afterRefused
	afterRefused.next = lastOfRun
	lastOfRun.event.PartitionKey = "k"
	single.event.PartitionKey = "m"

	var tried []int64
	record := func(j *job) (bool, error) {
		tried = append(tried, j.event.ID)
		switch j {
		case lost:
			return false, nil // applied = false: no longer ours
		case refused:
			return false, &pgconn.PgError{Code: "22P05", Message: "character has no equivalent"}
		}
		return true, nil
	}
	rest, err := r.recordEach(context.Background(), []*job{lost, afterLost, refused, afterRefused, lastOfRun, single},
		errors.New("batch refused"), record)
	require.NoError(t, err)
	require.Empty(t, rest)
	require.Equal(t, []int64{1, 3, 3, 6}, tried,
		"the rows after a lost row and after a row refused even escaped are not recorded; another key's row is")
}
