package gocheck

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/pgdrain/pgdrain/drainer"
)

// TestDrainer_InfiniteTimesInRowsWedgeNothing: the table lets writers put infinite times in rows,
// and the drainer delivers them like any other. A producer (pgdrain_producer) may write created_at,
// an event column, so 'infinity' or '-infinity' there is its to write; a role granted
// next_attempt_at (docs/sql-api.md: the way to delay events with a plain INSERT) may write
// '-infinity', which the table's max_delay CHECK lets through (it bounds times ahead only). Before,
// every claim that returned a row created at an infinite time failed in the drainer's read-back
// ("cannot convert infinity to bigint"), after leasing or locking its batch, so the whole queue was
// delivered no more, for ever; so did a NULL created_at, which an adopted table may allow; and
// next_due of an unpartitioned queue with a next attempt at '-infinity' failed every wait ("cannot
// subtract infinite timestamps").
func TestDrainer_InfiniteTimesInRowsWedgeNothing(t *testing.T) {
	t.Parallel()
	drEachMode(t, func(t *testing.T, mode drainer.ClaimMode) {
		for _, partition := range []string{"", "resource_id"} {
			t.Run("partition="+partition, func(t *testing.T) {
				q := drNewQueue(t, drQueueOpts{partitionColumn: partition})
				ctx := context.Background()
				producer := loginAs(t, q.db, "pgdrain_producer")
				// insert writes one event of key "k" (no key on an unpartitioned queue) with one time column set.
				insert := func(w interface {
					Exec(context.Context, string, ...any) (pgconn.CommandTag, error)
				}, seq int, column, at string) error {
					keyColumn, keyValue := "", ""
					if partition != "" {
						keyColumn, keyValue = ", "+partition, ", 'k'"
					}
					_, err := w.Exec(ctx, fmt.Sprintf(`INSERT INTO public.events (event_type, payload, %s%s)
						VALUES ('e', jsonb_build_object('seq', $1::int), NULLIF($2, '')::timestamptz%s)`, column, keyColumn, keyValue), seq, at)
					return err
				}
				// A producer writes events created "at" infinite times.
				for i, at := range []string{"infinity", "-infinity", "now"} {
					require.NoError(t, insert(producer, i, "created_at", at), "a producer writes created_at %s", at)
				}
				// The owner (or a role granted next_attempt_at) writes a next attempt at -infinity.
				require.NoError(t, insert(q.pool, 3, "next_attempt_at", "-infinity"))
				// An adopted table's created_at may allow NULL.
				_, err := q.pool.Exec(ctx, `ALTER TABLE public.events ALTER COLUMN created_at DROP NOT NULL`)
				require.NoError(t, err)
				require.NoError(t, insert(q.pool, 4, "created_at", ""))

				var mu sync.Mutex
				var got []int
				d, _ := drNew(t, q.pool, q.config(mode), func(_ context.Context, _ string, e drEvent) error {
					mu.Lock()
					defer mu.Unlock()
					got = append(got, e.Seq)
					return nil
				})
				stop := drStart(t, d)
				drWaitFor(t, 10*time.Second, "every event is delivered", func() bool { return q.sent(t) == 5 })
				require.NoError(t, stop())
				mu.Lock()
				defer mu.Unlock()
				if partition != "" {
					require.Equal(t, []int{0, 1, 2, 3, 4}, got, "in key order")
				} else {
					require.ElementsMatch(t, []int{0, 1, 2, 3, 4}, got)
				}
			})
		}
	})
}
