package gocheck

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/pgdrain/pgdrain/internal/testdb"
)

// notifications listens on channel, runs each statement in its own transaction, and returns how
// many notifications arrived for each.
func notifications(t *testing.T, db *testdb.DB, channel string, statements ...string) []int {
	t.Helper()
	ctx := context.Background()
	listener, err := pgx.Connect(ctx, db.URL)
	require.NoError(t, err)
	defer listener.Close(ctx)
	_, err = listener.Exec(ctx, "LISTEN "+channel)
	require.NoError(t, err)
	counts := make([]int, len(statements))
	for i, sql := range statements {
		_, err := db.Pool.Exec(ctx, sql)
		require.NoError(t, err)
		for {
			wctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
			_, err := listener.WaitForNotification(wctx)
			cancel()
			if err != nil {
				break
			}
			counts[i]++
		}
	}
	return counts
}

// NOTIFY takes a cluster-wide lock at commit, so a partitioned queue notifies only when a statement
// makes a partition claimable (a key with no pending work); rows added behind an existing head wait
// for the drainer that finishes the head. An unpartitioned queue notifies on every insert, and a
// statement inserts at most one notification whatever its row count. (Queues that notify 'always':
// the default, 'when_waiting', also needs a drainer that waits, see notify_when_waiting_test.go.)
func TestNotify_OnlyWhenAPartitionBecomesClaimable(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	exec(t, db.Pool, `SELECT outbox.create_queue('public.parted', 'resource_id', channel => 'parted_wake');
		SELECT outbox.create_queue('public.flat', channel => 'flat_wake');
		SELECT outbox.set_notify('public.parted', 'always'); SELECT outbox.set_notify('public.flat', 'always')`)

	require.Equal(t, []int{1, 0, 1, 1}, notifications(t, db, "parted_wake",
		`INSERT INTO public.parted (event_type, payload, resource_id) SELECT 'e', '{}', 'k' || g FROM generate_series(1, 50) g`,
		`INSERT INTO public.parted (event_type, payload, resource_id) SELECT 'e', '{}', 'k' || g FROM generate_series(1, 50) g`,
		`INSERT INTO public.parted (event_type, payload, resource_id) VALUES ('e', '{}', 'k1'), ('e', '{}', 'brand-new')`,
		`SELECT outbox.enqueue('public.parted', 'e', '{}', 'another-new')`),
		"new keys notify once per statement; rows behind existing heads do not notify")

	require.Equal(t, []int{1, 1}, notifications(t, db, "flat_wake",
		`INSERT INTO public.flat (event_type, payload) SELECT 'e', '{}' FROM generate_series(1, 50) g`,
		`SELECT outbox.enqueue('public.flat', 'e', '{}')`),
		"an unpartitioned queue notifies on every insert statement, once")
}
