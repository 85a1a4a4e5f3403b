package gocheck

import (
	"context"
	"database/sql"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pgdrain/pgdrain/internal/testdb"
)

// Upgrading outbox from 00002 to 00003 (commit order; the development history, sql/history/outbox)
// with a registered partitioned queue that holds pending and leased rows: its triggers and rows and
// lease stay, the commit step is installed, the bad interleaving is then delivered in commit order;
// and back down to 00002, producers and drains work with the old triggers.
func TestProducers_UpgradeToCommitOrderKeepsRegisteredQueues(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testdb.NewEmpty(t)
	sqlDB, err := sql.Open("pgx", db.URL)
	require.NoError(t, err)
	defer sqlDB.Close()
	provider := historyProvider(t, sqlDB, "outbox")
	_, err = provider.UpTo(ctx, 2)
	require.NoError(t, err)

	exec := func(q string, args ...any) {
		t.Helper()
		_, err := db.Pool.Exec(ctx, q, args...)
		require.NoError(t, err)
	}
	exec(`SELECT outbox.create_queue('public.events', 'resource_id')`)
	old1 := insertMarked(t, db.Pool, "k", "old1")
	old2 := insertMarked(t, db.Pool, "k", "old2")
	var leased int64
	var token string
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT id, lease_token::text FROM outbox.claim_batch('public.events', 1)`).Scan(&leased, &token))
	require.Equal(t, old1, leased)

	_, err = provider.Up(ctx)
	require.NoError(t, err)
	var triggers []string
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT array_agg(tgname::text ORDER BY tgname) FROM pg_trigger
		WHERE tgrelid = 'public.events'::regclass AND NOT tgisinternal`).Scan(&triggers))
	require.Equal(t, []string{"pgdrain_heads", "pgdrain_snapshot", "pgdrain_truncate"}, triggers,
		"the queue's triggers are kept (00004 adds the TRUNCATE trigger; 00019 drops the NOTIFY trigger of a partitioned queue, whose commit step notifies; 00025 adds the snapshot producers' one)")
	var hook bool
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_trigger
		WHERE tgrelid = 'outbox.commit_hooks'::regclass AND tgname = 'pgdrain_commit' AND tgdeferrable AND tginitdeferred)`).Scan(&hook))
	require.True(t, hook, "the commit step's deferred trigger is installed")
	var problems int
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT count(*) FROM outbox.check_indexes('public.events')`).Scan(&problems))
	require.Zero(t, problems)
	var stillLeased bool
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT lease_token IS NOT NULL FROM public.events WHERE id = $1`, old1).Scan(&stillLeased))
	require.True(t, stillLeased, "the lease taken before the upgrade is kept")

	a, b := beginTx(t, db.Pool), beginTx(t, db.Pool)
	insertMarked(t, a, "k", "A")
	insertMarked(t, b, "k", "B")
	require.NoError(t, b.Commit(ctx))
	require.NoError(t, a.Commit(ctx))
	exec(`SELECT outbox.apply_result('public.events', $1, $2::uuid, 'sent')`, old1, token)
	delivered := drainOnce(t, db.Pool)
	require.Equal(t, []string{"old2", "B", "A"}, marksOf(t, db.Pool, delivered))
	require.Equal(t, old2, delivered[0])
	requireIDsAscending(t, delivered)

	_, err = provider.DownTo(ctx, 2)
	require.NoError(t, err)
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT array_agg(tgname::text ORDER BY tgname) FROM pg_trigger
		WHERE tgrelid = 'public.events'::regclass AND NOT tgisinternal`).Scan(&triggers))
	require.Equal(t, []string{"pgdrain_heads", "pgdrain_notify"}, triggers)
	down := insertMarked(t, db.Pool, "fresh", "down")
	require.Equal(t, []int64{down}, drainOnce(t, db.Pool), "after the downgrade the old triggers make heads at insert")
}
