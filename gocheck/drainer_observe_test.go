package gocheck

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pgdrain/pgdrain/drainer"
)

// The wedge observer gets, rate-limited, only the wedgeReportLimit (10) oldest stuck partitions,
// oldest first, with head, attempts, last error, age and reason; with WedgeWarnAfter 0 it is
// never called.
func TestDrainer_WedgeObserver_ReportsTheOldestStuckPartitions(t *testing.T) {
	t.Parallel()
	drEachMode(t, func(t *testing.T, mode drainer.ClaimMode) {
		q := drNewQueue(t, drQueueOpts{partitionColumn: "resource_id"})
		const stuck = 13
		for i := range stuck {
			q.enqueue(t, fmt.Sprintf("res-%02d", i), "op", i)
		}
		// res-00 is the oldest, res-12 the youngest; all older than the threshold.
		_, err := q.pool.Exec(context.Background(),
			`UPDATE public.events SET created_at = now() - interval '1 hour' + id * interval '1 second'`)
		require.NoError(t, err)

		var mu sync.Mutex
		var reports [][]drainer.WedgedPartition
		cfg := q.config(mode)
		cfg.WedgeWarnAfter = 200 * time.Millisecond
		d, _ := drNew(t, q.pool, cfg, func(context.Context, string, drEvent) error { return drErr("peer down") },
			drainer.WithWedgeObserver[drEvent](func(_ context.Context, w []drainer.WedgedPartition) {
				mu.Lock()
				defer mu.Unlock()
				reports = append(reports, w)
			}))
		stop := drStart(t, d)
		var last []drainer.WedgedPartition
		drWaitFor(t, 10*time.Second, "a report after every head failed", func() bool {
			mu.Lock()
			defer mu.Unlock()
			if len(reports) == 0 {
				return false
			}
			last = reports[len(reports)-1]
			for _, w := range last {
				if w.HeadAttempts == 0 {
					return false
				}
			}
			return true
		})
		require.NoError(t, stop())

		require.Len(t, last, 10, "only the wedgeReportLimit oldest partitions")
		for i, w := range last {
			require.Equal(t, fmt.Sprintf("res-%02d", i), w.PartitionKey, "oldest first")
			require.Equal(t, int64(i+1), w.HeadID)
			require.Equal(t, "public.events", w.Table)
			require.GreaterOrEqual(t, w.HeadAttempts, 1)
			require.Equal(t, "peer down", w.HeadLastError)
			require.Greater(t, w.Age, 50*time.Minute)
			require.EqualValues(t, 1, w.Pending)
			require.NotEmpty(t, w.Reason)
		}
		mu.Lock()
		n := len(reports)
		mu.Unlock()
		require.Less(t, n, 60, "rate-limited to about one report per WedgeWarnAfter")

		// Off: WedgeWarnAfter 0 never calls the observer.
		calls := 0
		cfg.WedgeWarnAfter = 0
		d, _ = drNew(t, q.pool, cfg, func(context.Context, string, drEvent) error { return drErr("peer down") },
			drainer.WithWedgeObserver[drEvent](func(context.Context, []drainer.WedgedPartition) { calls++ }))
		stop = drStart(t, d)
		time.Sleep(500 * time.Millisecond)
		require.NoError(t, stop())
		require.Zero(t, calls)
	})
}

// At start the drainer logs what outbox.check_indexes finds (here a decoy index) as a warning.
func TestDrainer_LogsIndexProblemsAtStart(t *testing.T) {
	t.Parallel()
	q := drNewQueue(t, drQueueOpts{})
	_, err := q.pool.Exec(context.Background(), `CREATE INDEX events_decoy ON public.events (created_at) WHERE sent_at IS NULL`)
	require.NoError(t, err)
	var buf syncBuffer
	logger := slog.New(slog.NewTextHandler(&buf, nil))
	d, err := drainer.New(q.pool, q.config(drainer.ClaimLease), drDecode,
		func(context.Context, string, drEvent) error { return nil }, drainer.WithLogger[drEvent](logger))
	require.NoError(t, err)
	stop := drStart(t, d)
	drWaitFor(t, 10*time.Second, "the warning", func() bool { return bytes.Contains(buf.Bytes(), []byte("events_decoy")) })
	require.NoError(t, stop())
	require.Contains(t, buf.String(), "level=WARN msg=\"queue index problem")
	require.Contains(t, buf.String(), "problem=decoy")
}

// syncBuffer is a bytes.Buffer safe for a logger and a reader.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) Bytes() []byte {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]byte(nil), b.buf.Bytes()...)
}

func (b *syncBuffer) String() string { return string(b.Bytes()) }
