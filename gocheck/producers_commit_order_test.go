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

// insertMarked inserts one event of key with payload {"tx": tx} and returns the id its insert saw
// (RETURNING).
func insertMarked(t *testing.T, q interface {
	QueryRow(context.Context, string, ...any) pgx.Row
}, key, tx string) int64 {
	t.Helper()
	var id int64
	require.NoError(t, q.QueryRow(context.Background(),
		`INSERT INTO public.events (event_type, payload, resource_id)
		 VALUES ('e', jsonb_build_object('tx', $2::text), $1) RETURNING id`, key, tx).Scan(&id))
	return id
}

// marksOf returns the tx marker of each id, in order.
func marksOf(t *testing.T, pool *pgxpool.Pool, ids []int64) []string {
	t.Helper()
	marks := make([]string, len(ids))
	for i, id := range ids {
		require.NoError(t, pool.QueryRow(context.Background(),
			`SELECT payload->>'tx' FROM public.events WHERE id = $1`, id).Scan(&marks[i]))
	}
	return marks
}

func requireIDsAscending(t *testing.T, ids []int64) {
	t.Helper()
	for i := 1; i < len(ids); i++ {
		require.Less(t, ids[i-1], ids[i], "delivered ids must ascend per key")
	}
}

// The bad interleaving of issue 6: producer A takes id a, producer B takes id b > a for the same
// key, B commits first, then A. Delivered order is commit order (B, then A) and still id order:
// A's row is renumbered at its commit to an id larger than b.
func TestProducers_DeliveryFollowsCommitOrder_DrainedAfterBothCommits(t *testing.T) {
	t.Parallel()
	db := orderQueue(t)
	ctx := context.Background()
	a, b := beginTx(t, db.Pool), beginTx(t, db.Pool)
	idA := insertMarked(t, a, "k", "A")
	idB := insertMarked(t, b, "k", "B")
	require.Less(t, idA, idB, "ids are assigned in the order A, B")
	require.NoError(t, b.Commit(ctx))
	require.NoError(t, a.Commit(ctx))

	delivered := drainOnce(t, db.Pool)
	require.Equal(t, []string{"B", "A"}, marksOf(t, db.Pool, delivered), "commit order")
	require.Equal(t, idB, delivered[0])
	require.Greater(t, delivered[1], idB, "A's row was renumbered past B's: id order is commit order")
	var kept bool
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM public.events WHERE id = $1)`, idA).Scan(&kept))
	require.False(t, kept, "the id A's insert returned is gone: a late row's id is provisional")
}

// The same interleaving with a drain between the two commits: B is delivered while A is open, and
// A as soon as it commits, with an id larger than B's (never a smaller id after a larger one).
func TestProducers_DeliveryFollowsCommitOrder_DrainedBetweenCommits(t *testing.T) {
	t.Parallel()
	db := orderQueue(t)
	ctx := context.Background()
	seed := insertMarked(t, db.Pool, "k", "seed")
	a, b := beginTx(t, db.Pool), beginTx(t, db.Pool)
	idA := insertMarked(t, a, "k", "A")
	idB := insertMarked(t, b, "k", "B")
	require.Less(t, idA, idB)
	require.NoError(t, b.Commit(ctx))
	require.Equal(t, []int64{seed, idB}, drainOnce(t, db.Pool), "B is delivered while A is still open")
	require.NoError(t, a.Commit(ctx))
	late := drainOnce(t, db.Pool)
	require.Equal(t, []string{"A"}, marksOf(t, db.Pool, late), "A is claimable as soon as it commits")
	require.Greater(t, late[0], idB)
}

// Many producers of one hot key, each writing one to three rows and pausing before COMMIT, so ids
// are taken in one order and commits happen in another. Just before COMMIT each transaction bumps a
// counter row and stamps its rows with the value: the row lock makes that value the commit order.
// Delivery must follow it, each transaction's rows together and in their insert order.
func TestProducers_CommitOrderHoldsForManyConcurrentProducersOfOneKey(t *testing.T) {
	t.Parallel()
	db := orderQueue(t)
	ctx := context.Background()
	_, err := db.Pool.Exec(ctx, `CREATE TABLE commit_counter (n int NOT NULL); INSERT INTO commit_counter VALUES (0)`)
	require.NoError(t, err)

	const producers = 24
	var wg sync.WaitGroup
	errs := make(chan error, producers)
	for p := 0; p < producers; p++ {
		wg.Add(1)
		go func(p int) {
			defer wg.Done()
			errs <- pgx.BeginFunc(ctx, db.Pool, func(tx pgx.Tx) error {
				for r := 0; r <= p%3; r++ {
					if _, err := tx.Exec(ctx, `INSERT INTO public.events (event_type, payload, resource_id)
						VALUES ('e', jsonb_build_object('p', $1::int, 'r', $2::int), 'hot')`, p, r); err != nil {
						return err
					}
				}
				time.Sleep(time.Duration((p*7)%11) * time.Millisecond)
				if _, err := tx.Exec(ctx, `UPDATE commit_counter SET n = n + 1`); err != nil {
					return err
				}
				_, err := tx.Exec(ctx, `UPDATE public.events SET payload = payload || jsonb_build_object('c', (SELECT n FROM commit_counter))
					WHERE payload->>'p' = $1::int::text`, p)
				return err
			})
		}(p)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}

	delivered := drainOnce(t, db.Pool)
	require.Len(t, delivered, producers*2, "8 producers wrote 1 row, 8 wrote 2, 8 wrote 3")
	type row struct{ c, r int }
	got := make([]row, len(delivered))
	for i, id := range delivered {
		require.NoError(t, db.Pool.QueryRow(ctx, `SELECT (payload->>'c')::int, (payload->>'r')::int FROM public.events WHERE id = $1`,
			id).Scan(&got[i].c, &got[i].r))
	}
	for i := 1; i < len(got); i++ {
		prev, cur := got[i-1], got[i]
		require.True(t, prev.c < cur.c || prev.c == cur.c && prev.r+1 == cur.r,
			"delivery %d: commit %d row %d came after commit %d row %d (ids %v, rows %v)", i, cur.c, cur.r, prev.c, prev.r, delivered, got)
	}
	requireIDsAscending(t, delivered)
}

// The trap of an xid watermark: T2 gets its xid first (an unrelated write), then T1 writes E1 and
// commits, then T2 reads E1 and writes E2. E2 is causally later but has the older xid; ordering by
// xid would deliver it first. pgdrain delivers E1, then E2.
func TestProducers_CausallyLaterEventIsDeliveredLater(t *testing.T) {
	t.Parallel()
	db := orderQueue(t)
	ctx := context.Background()
	_, err := db.Pool.Exec(ctx, `CREATE TABLE unrelated (x int)`)
	require.NoError(t, err)

	t2 := beginTx(t, db.Pool)
	_, err = t2.Exec(ctx, `INSERT INTO unrelated VALUES (1)`)
	require.NoError(t, err)
	e1 := insertMarked(t, db.Pool, "k", "E1")
	var seen int
	require.NoError(t, t2.QueryRow(ctx, `SELECT count(*) FROM public.events WHERE payload->>'tx' = 'E1'`).Scan(&seen))
	require.Equal(t, 1, seen, "T2 read E1")
	e2 := insertMarked(t, t2, "k", "E2")
	require.NoError(t, t2.Commit(ctx))

	var olderXid bool
	require.NoError(t, db.Pool.QueryRow(ctx, `
		SELECT (SELECT xmin::text::bigint FROM public.events WHERE id = $2) < (SELECT xmin::text::bigint FROM public.events WHERE id = $1)`,
		e1, e2).Scan(&olderXid))
	require.True(t, olderXid, "the trap is set: the causally later E2 has the older xid")
	require.Equal(t, []string{"E1", "E2"}, marksOf(t, db.Pool, drainOnce(t, db.Pool)))
}

// Two producers of a key that has no head yet do not wait for each other (heads are made at
// COMMIT, under the slot's commit lock), and delivery follows their commits.
func TestProducers_NewKeyProducersDoNotWaitForEachOther(t *testing.T) {
	t.Parallel()
	db := orderQueue(t)
	ctx := context.Background()
	a, b := beginTx(t, db.Pool), beginTx(t, db.Pool)
	insertMarked(t, a, "fresh", "A")
	insertMarked(t, b, "fresh", "B") // would block here if B waited for A's head
	require.NoError(t, b.Commit(ctx))
	require.NoError(t, a.Commit(ctx))
	require.Equal(t, []string{"B", "A"}, marksOf(t, db.Pool, drainOnce(t, db.Pool)))
}

// Rows written inside a savepoint belong to the transaction: a late transaction's savepoint rows
// are renumbered with the rest, and a rolled back savepoint leaves nothing behind.
func TestProducers_SavepointRowsFollowTheirTransaction(t *testing.T) {
	t.Parallel()
	db := orderQueue(t)
	ctx := context.Background()
	exec := func(tx pgx.Tx, sql string) {
		_, err := tx.Exec(ctx, sql)
		require.NoError(t, err)
	}
	a, b := beginTx(t, db.Pool), beginTx(t, db.Pool)
	insertMarked(t, a, "k", "A1")
	exec(a, `SAVEPOINT s1`)
	insertMarked(t, a, "k", "A2")
	exec(a, `RELEASE SAVEPOINT s1`)
	exec(a, `SAVEPOINT s2`)
	insertMarked(t, a, "gone", "A3")
	exec(a, `ROLLBACK TO SAVEPOINT s2`)
	insertMarked(t, b, "k", "B")
	require.NoError(t, b.Commit(ctx))
	require.NoError(t, a.Commit(ctx))

	delivered := drainOnce(t, db.Pool)
	require.Equal(t, []string{"B", "A1", "A2"}, marksOf(t, db.Pool, delivered))
	requireIDsAscending(t, delivered)
	var heads int
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT count(*) FROM outbox.partition_heads WHERE partition_key = 'gone'`).Scan(&heads))
	require.Zero(t, heads)
}

// Under REPEATABLE READ the commit step reads the clocks in the transaction's snapshot. A producer
// that another producer of its key overtook fails at COMMIT with serialization_failure (40001),
// which that isolation level already obliges callers to retry; the retry is delivered after.
func TestProducers_RepeatableReadProducerOvertakenFailsWithSerializationFailure(t *testing.T) {
	t.Parallel()
	db := orderQueue(t)
	ctx := context.Background()
	a, err := db.Pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead})
	require.NoError(t, err)
	t.Cleanup(func() { _ = a.Rollback(ctx) })
	insertMarked(t, a, "k", "A")
	insertMarked(t, db.Pool, "k", "B")
	err = a.Commit(ctx)
	code, _ := sqlState(err)
	require.Equal(t, "40001", code, "%v", err)

	require.NoError(t, pgx.BeginTxFunc(ctx, db.Pool, pgx.TxOptions{IsoLevel: pgx.RepeatableRead}, func(tx pgx.Tx) error {
		insertMarked(t, tx, "k", "A")
		return nil
	}), "the retry commits")
	require.Equal(t, []string{"B", "A"}, marksOf(t, db.Pool, drainOnce(t, db.Pool)))
}

// A snapshot producer overtaken by a READ COMMITTED one, on a key that already has its head and its
// clock row (so nothing but the clock can tell it: no head is made). The READ COMMITTED commit step
// locks its clock without writing it unless a REPEATABLE READ or SERIALIZABLE producer of the queue
// has announced itself (pgdrain_snapshot), as A did by inserting first; so it writes it, and A
// fails with 40001; the retry is delivered after B.
func TestProducers_SnapshotProducerOvertakenByAReadCommittedOneFailsWithSerializationFailure(t *testing.T) {
	t.Parallel()
	for _, level := range []pgx.TxIsoLevel{pgx.RepeatableRead, pgx.Serializable} {
		t.Run(string(level), func(t *testing.T) {
			t.Parallel()
			db := orderQueue(t)
			ctx := context.Background()
			insertMarked(t, db.Pool, "k", "seed")
			a, err := db.Pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: level})
			require.NoError(t, err)
			t.Cleanup(func() { _ = a.Rollback(ctx) })
			insertMarked(t, a, "k", "A")
			insertMarked(t, db.Pool, "k", "B")
			err = a.Commit(ctx)
			code, _ := sqlState(err)
			require.Equal(t, "40001", code, "%v", err)
			require.NoError(t, pgx.BeginTxFunc(ctx, db.Pool, pgx.TxOptions{IsoLevel: level}, func(tx pgx.Tx) error {
				insertMarked(t, tx, "k", "A")
				return nil
			}), "the retry commits")
			require.Equal(t, []string{"seed", "B", "A"}, marksOf(t, db.Pool, drainOnce(t, db.Pool)))
		})
	}
}

// The lateness question compares keys as text (the notes' form): a late row of a bigint partition
// column is renumbered past the row another producer of its key committed first, and a queue table
// renamed between two such commits is asked under its new name.
func TestProducers_LateRowOfABigintKeyIsRenumbered(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	ctx := context.Background()
	exec(t, db.Pool, `CREATE TABLE public.accounts_out (id bigint GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY,
		event_type text NOT NULL, payload jsonb NOT NULL, created_at timestamptz NOT NULL DEFAULT now(), account bigint)`)
	exec(t, db.Pool, `SELECT outbox.create_queue('public.accounts_out', 'account')`)
	for round, table := range []string{"public.accounts_out", "public.accounts_renamed"} {
		if round == 1 {
			exec(t, db.Pool, `ALTER TABLE public.accounts_out RENAME TO accounts_renamed`)
		}
		insert := fmt.Sprintf(`INSERT INTO %s (event_type, payload, account) VALUES ('e', jsonb_build_object('tx', $1::text), 5) RETURNING id`, table)
		a := beginTx(t, db.Pool)
		var idA, idB int64
		require.NoError(t, a.QueryRow(ctx, insert, fmt.Sprintf("A%d", round)).Scan(&idA))
		require.NoError(t, db.Pool.QueryRow(ctx, insert, fmt.Sprintf("B%d", round)).Scan(&idB))
		require.Less(t, idA, idB)
		require.NoError(t, a.Commit(ctx))
		var marks []string
		require.NoError(t, db.Pool.QueryRow(ctx, fmt.Sprintf(`SELECT array_agg(payload->>'tx' ORDER BY id) FROM %s`, table)).Scan(&marks))
		require.Equal(t, []string{"B0", "A0", "B1", "A1"}[:2*round+2], marks, "id order is commit order, round %d", round)
	}
}

// A transaction of several statements whose ids are not contiguous: another producer took an id
// between two of its statements and committed first. The sequence gave out nothing after its last
// id, so only the ids inside its range can tell that it is late (all of them its own, it would not
// be): A's first row of key k is delivered after B's.
func TestProducers_ManyStatementTransactionOvertakenInsideItsIdsIsRenumbered(t *testing.T) {
	t.Parallel()
	db := orderQueue(t)
	ctx := context.Background()
	a, err := loginAs(t, db, "pgdrain_producer").Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = a.Rollback(ctx) }()
	idA1 := insertMarked(t, a, "k", "A1")
	idB := insertMarked(t, loginAs(t, db, "pgdrain_producer"), "k", "B")
	idA2 := insertMarked(t, a, "j", "A2")
	require.Less(t, idA1, idB)
	require.Less(t, idB, idA2, "B's id lies inside A's, and A's last id is the last one given out")
	require.NoError(t, a.Commit(ctx))

	var marks []string
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT array_agg(payload->>'tx' ORDER BY id) FROM public.events
		WHERE resource_id = 'k'`).Scan(&marks))
	require.Equal(t, []string{"B", "A1"}, marks, "id order is commit order")
	var ofK []string
	for _, m := range marksOf(t, db.Pool, drainOnce(t, db.Pool)) {
		if m != "A2" {
			ofK = append(ofK, m)
		}
	}
	require.Equal(t, []string{"B", "A1"}, ofK, "delivered in commit order")
}

// A sequence with CACHE > 1 hands each session its own block of ids, so a REPEATABLE READ or
// SERIALIZABLE producer can take an id below one a READ COMMITTED producer committed before it
// announced itself, without a clock to tell it. Such a producer is renumbered past every id given
// out, always: A's id from its session's cache (below B's) is delivered after B's.
func TestProducers_SnapshotProducerOfACachedSequenceIsDeliveredAfterEarlierCommits(t *testing.T) {
	t.Parallel()
	db := orderQueue(t)
	ctx := context.Background()
	exec(t, db.Pool, `DO $$ BEGIN
		EXECUTE format('ALTER SEQUENCE %s CACHE 20', pg_get_serial_sequence('public.events', 'id'));
	END $$`)
	connA, err := db.Pool.Acquire(ctx)
	require.NoError(t, err)
	defer connA.Release()
	connB, err := db.Pool.Acquire(ctx)
	require.NoError(t, err)
	defer connB.Release()
	// The key's first row, from A's session (whose block of ids it opens), makes its clock row;
	// B's commit then only locks it.
	first := insertMarked(t, connA, "k", "seed")
	idB := insertMarked(t, connB, "k", "B")
	require.Greater(t, idB, first+1, "B's session has a block of its own, above A's")

	a, err := connA.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.Serializable})
	require.NoError(t, err)
	idA := insertMarked(t, a, "k", "A")
	require.Less(t, idA, idB, "A's id comes from its session's block, below B's committed one")
	require.NoError(t, a.Commit(ctx))

	delivered := drainOnce(t, db.Pool)
	require.Equal(t, []string{"seed", "B", "A"}, marksOf(t, db.Pool, delivered), "commit order")
	require.Greater(t, delivered[2], idB, "A was renumbered past B")
}

// Two queues written in opposite orders by two transactions: the commit step takes the queues'
// commit locks in queue order, so this does not deadlock either.
func TestProducers_OppositeQueueOrderDoesNotDeadlock(t *testing.T) {
	t.Parallel()
	db := orderQueue(t)
	ctx := context.Background()
	_, err := db.Pool.Exec(ctx, `SELECT outbox.create_queue('public.audit', 'resource_id')`)
	require.NoError(t, err)
	insert := func(tx pgx.Tx, table string) {
		_, err := tx.Exec(ctx, fmt.Sprintf(`INSERT INTO %s (event_type, payload, resource_id) VALUES ('e', '{}', 'same')`, table))
		require.NoError(t, err)
	}
	for round := 0; round < 20; round++ {
		t1, t2 := beginTx(t, db.Pool), beginTx(t, db.Pool)
		insert(t1, "public.events")
		insert(t2, "public.audit")
		insert(t1, "public.audit")
		insert(t2, "public.events")
		var wg sync.WaitGroup
		var err1, err2 error
		wg.Add(2)
		go func() { defer wg.Done(); err1 = t1.Commit(ctx) }()
		go func() { defer wg.Done(); err2 = t2.Commit(ctx) }()
		wg.Wait()
		require.NoError(t, err1)
		require.NoError(t, err2)
	}
	require.Len(t, drainOnce(t, db.Pool), 40)
}
