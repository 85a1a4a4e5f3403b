package gocheck

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/pgdrain/pgdrain/drainer"
)

// A drainer that keeps finding rows polls for BusyPoll before it asks producers to NOTIFY (issue 29
// item 4: each NOTIFY serialises its producer's commit with every other notifying commit, and a
// drainer that marked itself waiting after every row it drained made every producer notify). Rows
// arrive one by one every 5 ms for a second on a 'when_waiting' partitioned queue, each of a new key
// (its commit makes the partition claimable, the case that notifies): with BusyPoll a second, the
// producers send at most the NOTIFY that woke the idle drainer; with BusyPoll off (the control,
// which shows the count can fail) they notify over and over. Every row is delivered either way.
func TestDrainer_BusyPollSparesProducersTheirNotify(t *testing.T) {
	t.Parallel()
	drEachMode(t, func(t *testing.T, mode drainer.ClaimMode) {
		for _, c := range []struct {
			name     string
			busyPoll time.Duration
			check    func(t *testing.T, notifies int64)
		}{
			{"busy poll", time.Second, func(t *testing.T, n int64) {
				require.LessOrEqual(t, n, int64(2), "producers of a drainer that keeps finding rows do not notify")
			}},
			{"off", -1, func(t *testing.T, n int64) {
				require.GreaterOrEqual(t, n, int64(10), "without busy polling producers notify again and again")
			}},
		} {
			t.Run(c.name, func(t *testing.T) {
				ctx := context.Background()
				q := drNewQueue(t, drQueueOpts{partitionColumn: "resource_id"})
				exec(t, q.pool, `SELECT outbox.set_notify($1, 'when_waiting')`, q.table)
				var channel string
				require.NoError(t, q.pool.QueryRow(ctx, `SELECT channel FROM outbox.queues WHERE queue = $1`, q.table).Scan(&channel))
				listener, err := pgx.Connect(ctx, q.db.URL)
				require.NoError(t, err)
				defer listener.Close(ctx)
				_, err = listener.Exec(ctx, "LISTEN "+pgx.Identifier{channel}.Sanitize())
				require.NoError(t, err)
				var notifies atomic.Int64
				lctx, stopListening := context.WithCancel(ctx)
				listened := make(chan struct{})
				go func() {
					defer close(listened)
					for {
						if _, err := listener.WaitForNotification(lctx); err != nil {
							return
						}
						notifies.Add(1)
					}
				}()

				cfg := q.config(mode)
				cfg.BusyPoll = c.busyPoll
				// Paced claims (TrickleInterval) keep finding rows too, and would spare the control
				// its NOTIFYs: this test is about BusyPoll alone.
				cfg.TrickleInterval = -1
				d, _ := drNew(t, q.pool, cfg, func(context.Context, string, drEvent) error { return nil })
				const rows = 200
				drTrickleIn(t, q, rows, d)
				stopListening()
				<-listened
				t.Logf("%s, BusyPoll %s: %d NOTIFYs for %d rows", mode, c.busyPoll, notifies.Load(), rows)
				c.check(t, notifies.Load())
			})
		}
	})
}
