package gocheck

import (
	"context"
	"fmt"
	"math/rand"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/pgdrain/pgdrain/internal/testdb"
)

// A cancelled call leaves no lock behind, so no producer waits for it. The calls that took a
// session-level advisory lock for a moment were cancelled between the statement that took it and
// the one that let go of it, and the lock stayed held on the idle connection (a pool's, or
// PgBouncer's server connection): a producer's commit step asking whether a REPEATABLE READ
// producer is open then held every REPEATABLE READ producer of the queue, and a drainer marking
// itself waiting every producer, at COMMIT until that connection closed, statement_timeout or not
// (a helper's cancel spam: a leak in every run of 3,000 calls). Now the commit step takes and lets
// go of its lock in one expression, and drainer_waits / drainer_woke take transaction locks in a
// block they always roll back. Each call runs 1,500 times as its role while another session
// cancels it every 0-400 µs; then its backend holds no advisory lock, and producers (READ
// COMMITTED and REPEATABLE READ, both queue kinds) commit with a lock_timeout.
func TestCancels_ACancelledCallLeavesNoSessionLockBehind(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testdb.New(t)
	exec(t, db.Pool, `SELECT outbox.create_queue('public.parted', 'resource_id');
		SELECT outbox.create_queue('public.flat')`)
	for _, c := range []struct{ name, role, sql string }{
		{"one-row producer", "pgdrain_producer",
			`INSERT INTO public.parted (event_type, payload, resource_id) VALUES ('e', '{}', 'k' || (random() * 20)::int)`},
		{"many-row producer", "pgdrain_producer",
			`INSERT INTO public.parted (event_type, payload, resource_id) SELECT 'e', '{}', 'k' || (random() * 20)::int FROM generate_series(1, 3)`},
		{"drainer_waits", "pgdrain_worker", `SELECT outbox.drainer_waits('public.parted', '1 second')`},
		{"drainer_woke", "pgdrain_worker",
			`SELECT outbox.drainer_woke('public.flat', outbox.drainer_waits('public.flat', '1 second'))`},
	} {
		t.Run(c.name, func(t *testing.T) {
			conn := loginAs(t, db, c.role)
			admin, err := pgx.Connect(ctx, db.URL)
			require.NoError(t, err)
			defer admin.Close(ctx)
			var pid int
			require.NoError(t, conn.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&pid))
			stop := make(chan struct{})
			cancelled := make(chan struct{})
			go func() {
				defer close(cancelled)
				for {
					select {
					case <-stop:
						return
					default:
					}
					time.Sleep(time.Duration(rand.Intn(400)) * time.Microsecond)
					_, _ = admin.Exec(ctx, `SELECT pg_cancel_backend($1)`, pid)
				}
			}()
			failed := 0
			for i := 0; i < 1500; i++ {
				if _, err := conn.Exec(ctx, c.sql); err != nil {
					failed++
				}
			}
			close(stop)
			<-cancelled
			for i := 0; i < 3; i++ { // a cancel sent at the end lands on one of these
				_, _ = conn.Exec(ctx, `SELECT 1`)
			}
			require.Positive(t, failed, "some calls were cancelled")
			held := func() []string {
				var held []string
				rows, err := admin.Query(ctx, `SELECT format('%s/%s/%s %s', classid, objid, objsubid, mode)
					FROM pg_locks WHERE locktype = 'advisory' AND pid = $1`, pid)
				require.NoError(t, err)
				for rows.Next() {
					var l string
					require.NoError(t, rows.Scan(&l))
					held = append(held, l)
				}
				require.NoError(t, rows.Err())
				return held
			}
			require.Empty(t, held(), "advisory locks left on the idle backend after %d cancelled calls", failed)

			producer := loginAs(t, db, "pgdrain_producer")
			_, err = producer.Exec(ctx, `SET lock_timeout = '2s'`)
			require.NoError(t, err)
			for _, isolation := range []pgx.TxIsoLevel{pgx.ReadCommitted, pgx.RepeatableRead} {
				tx, err := producer.BeginTx(ctx, pgx.TxOptions{IsoLevel: isolation})
				require.NoError(t, err)
				_, err = tx.Exec(ctx, fmt.Sprintf(`INSERT INTO public.parted (event_type, payload, resource_id)
					VALUES ('after', '{}', '%s')`, isolation))
				require.NoError(t, err, isolation)
				_, err = tx.Exec(ctx, `INSERT INTO public.flat (event_type, payload) VALUES ('after', '{}')`)
				require.NoError(t, err, isolation)
				require.NoError(t, tx.Commit(ctx), "%s: a producer commits beside the cancelled calls' session", isolation)
			}
		})
	}
}
