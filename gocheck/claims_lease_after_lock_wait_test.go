package gocheck

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/pgdrain/pgdrain/internal/testdb"
)

// A claim that waits for a lock on the queue table (a migration, create_queue changing something,
// other DDL) hands out leases counted from after the wait: they were counted from before it, and a
// lease of one second returned after a wait of 1.5 s was over already, so another claimer took the
// rows while the first delivered them (an upgrade helper's finding; the Go drainer extends such
// leases, SQL clients did not). Unpartitioned, partitioned, and with runs, claimed as pgdrain_worker.
func TestClaims_ALeaseCountsFromAfterALockWait(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testdb.New(t)
	exec(t, db.Pool, `SELECT outbox.create_queue('public.flat');
		SELECT outbox.create_queue('public.parted', 'k');
		SELECT outbox.enqueue('public.flat', 'e', '{}') FROM generate_series(1, 3);
		SELECT outbox.enqueue('public.parted', 'e', '{}', 'k' || g % 2) FROM generate_series(1, 6) g`)
	worker := loginPool(t, db, "pgdrain_worker")
	for _, c := range []struct{ name, table, claim string }{
		{"claim_batch, unpartitioned", "public.flat", `SELECT leased_until, clock_timestamp() FROM outbox.claim_batch('public.flat', 3, '1 second')`},
		{"claim_batch, partitioned", "public.parted", `SELECT leased_until, clock_timestamp() FROM outbox.claim_batch('public.parted', 1, '1 second')`},
		{"claim_runs", "public.parted", `SELECT leased_until, clock_timestamp() FROM outbox.claim_runs('public.parted', 4, '1 second', 2)`},
	} {
		t.Run(c.name, func(t *testing.T) {
			holder, err := db.Pool.Begin(ctx)
			require.NoError(t, err)
			_, err = holder.Exec(ctx, `LOCK `+c.table+` IN SHARE ROW EXCLUSIVE MODE`)
			require.NoError(t, err)
			go func() {
				time.Sleep(1500 * time.Millisecond)
				_ = holder.Commit(ctx)
			}()
			rows, err := worker.Query(ctx, c.claim)
			require.NoError(t, err)
			var lease, returned time.Time
			n := 0
			_, err = pgx.ForEachRow(rows, []any{&lease, &returned}, func() error {
				n++
				require.True(t, lease.After(returned),
					"a lease of 1 s taken after a wait of 1.5 s ends %s, returned at %s", lease, returned)
				return nil
			})
			require.NoError(t, err)
			require.Positive(t, n, "the claim returned rows")
			exec(t, db.Pool, `UPDATE `+c.table+` SET leased_until = NULL, lease_token = NULL`)
		})
	}
}
