package gocheck

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/pgdrain/pgdrain/internal/testdb"
)

// orderQueue creates public.events partitioned by resource_id.
func orderQueue(t *testing.T) *testdb.DB {
	t.Helper()
	db := testdb.New(t)
	_, err := db.Pool.Exec(context.Background(), `SELECT outbox.create_queue('public.events', 'resource_id')`)
	require.NoError(t, err)
	return db
}

// beginTx opens a transaction on its own connection: one producer.
func beginTx(t *testing.T, pool *pgxpool.Pool) pgx.Tx {
	t.Helper()
	tx, err := pool.Begin(context.Background())
	require.NoError(t, err)
	t.Cleanup(func() { _ = tx.Rollback(context.Background()) })
	return tx
}

func insertEvent(t *testing.T, q interface {
	QueryRow(context.Context, string, ...any) pgx.Row
}, key string) int64 {
	t.Helper()
	var id int64
	require.NoError(t, q.QueryRow(context.Background(),
		`INSERT INTO public.events (event_type, payload, resource_id) VALUES ('e', '{}', $1) RETURNING id`, key).Scan(&id))
	return id
}

// drainOnce claims everything claimable now and records it as sent; it returns the ids in the order
// they were delivered.
func drainOnce(t *testing.T, pool *pgxpool.Pool) []int64 {
	t.Helper()
	var delivered []int64
	for {
		batch, err := deliverClaimed(context.Background(), pool)
		require.NoError(t, err)
		if len(batch) == 0 {
			return delivered
		}
		delivered = append(delivered, batch...)
	}
}

// deliverClaimed claims one batch of public.events and records it as sent, returning its ids in
// the order delivered; errors are returned, not failed on, so goroutines can use it.
func deliverClaimed(ctx context.Context, pool *pgxpool.Pool) ([]int64, error) {
	rows, err := pool.Query(ctx, `SELECT id, lease_token FROM outbox.claim_batch('public.events', 100)`)
	if err != nil {
		return nil, err
	}
	type lease struct {
		id    int64
		token [16]byte
	}
	batch, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (lease, error) {
		var l lease
		return l, r.Scan(&l.id, &l.token)
	})
	if err != nil {
		return nil, err
	}
	var delivered []int64
	for _, l := range batch {
		var ok bool
		if err := pool.QueryRow(ctx, `SELECT outbox.apply_result('public.events', $1, $2, 'sent')`, l.id, l.token).Scan(&ok); err != nil {
			return delivered, err
		}
		if !ok {
			return delivered, fmt.Errorf("apply_result of row %d with its fresh token changed nothing", l.id)
		}
		delivered = append(delivered, l.id)
	}
	return delivered, nil
}

// drainUntil drains until n rows were delivered (a head emptied while a producer was open may be
// parked briefly), failing after 10 seconds.
func drainUntil(t *testing.T, pool *pgxpool.Pool, n int) []int64 {
	t.Helper()
	var delivered []int64
	deadline := time.Now().Add(10 * time.Second)
	for len(delivered) < n && time.Now().Before(deadline) {
		delivered = append(delivered, drainOnce(t, pool)...)
		time.Sleep(50 * time.Millisecond)
	}
	return delivered
}

// opposite runs T1: k1 then k2, T2: k2 then k1, the second inserts at the same time, and returns
// the two transactions' errors (insert or commit).
func opposite(t *testing.T, pool *pgxpool.Pool) (err1, err2 error) {
	t.Helper()
	ctx := context.Background()
	t1, t2 := beginTx(t, pool), beginTx(t, pool)
	insertEvent(t, t1, "k1")
	insertEvent(t, t2, "k2")
	var wg sync.WaitGroup
	step := func(tx pgx.Tx, key string, out *error) {
		defer wg.Done()
		if _, err := tx.Exec(ctx, `INSERT INTO public.events (event_type, payload, resource_id) VALUES ('e', '{}', $1)`, key); err != nil {
			*out = err
			return
		}
		*out = tx.Commit(ctx)
	}
	wg.Add(2)
	go step(t1, "k2", &err1)
	go step(t2, "k1", &err2)
	wg.Wait()
	return err1, err2
}

// Keys that already have pending work: producers only take shared advisory locks while open, so two
// transactions writing k1,k2 and k2,k1 never wait for each other and both commit.
func TestProducers_OppositeKeyOrderOnExistingKeysDoesNotDeadlock(t *testing.T) {
	t.Parallel()
	db := orderQueue(t)
	insertEvent(t, db.Pool, "k1")
	insertEvent(t, db.Pool, "k2")
	err1, err2 := opposite(t, db.Pool)
	require.NoError(t, err1)
	require.NoError(t, err2)
	require.Len(t, drainOnce(t, db.Pool), 6)
}

// Keys that have no partition head yet: producers write no head until COMMIT, where each takes its
// slots' commit locks in slot order, so two transactions writing k1,k2 and k2,k1 never deadlock.
func TestProducers_OppositeKeyOrderOnNewKeysDoesNotDeadlock(t *testing.T) {
	t.Parallel()
	db := orderQueue(t)
	err1, err2 := opposite(t, db.Pool)
	require.NoError(t, err1)
	require.NoError(t, err2)
	require.Len(t, drainOnce(t, db.Pool), 4)
}

// One INSERT of 10,000 distinct keys works, both when every key is new and when every key already
// has a head, also while another producer of the same keys is open (the producers' advisory locks
// are hashed into at most 1024 slots per queue, so the lock table does not overflow).
func TestProducers_TenThousandKeysInOneInsert(t *testing.T) {
	t.Parallel()
	db := orderQueue(t)
	ctx := context.Background()
	const keys = 10000
	bulk := fmt.Sprintf(`INSERT INTO public.events (event_type, payload, resource_id)
		SELECT 'e', '{}', 'key-' || g FROM generate_series(1, %d) g`, keys)
	_, err := db.Pool.Exec(ctx, bulk)
	require.NoError(t, err)

	other := beginTx(t, db.Pool)
	_, err = other.Exec(ctx, bulk)
	require.NoError(t, err)
	tag, err := db.Pool.Exec(ctx, bulk)
	require.NoError(t, err, "a second producer of the same 10,000 keys does not wait and does not run out of locks")
	require.EqualValues(t, keys, tag.RowsAffected())
	require.NoError(t, other.Commit(ctx))

	var heads, pending int
	require.NoError(t, db.Pool.QueryRow(ctx, `
		SELECT (SELECT count(*) FROM outbox.partition_heads), (SELECT pending FROM outbox.stats('public.events'))`).Scan(&heads, &pending))
	require.Equal(t, keys, heads)
	require.Equal(t, 3*keys, pending)
}
