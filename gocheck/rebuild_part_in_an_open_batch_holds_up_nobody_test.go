package gocheck

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/pgdrain/pgdrain/internal/testdb"
)

// After a crash the heads come back in parts, each committed with the claim that made it
// (outbox._restore_heads). Here the backlog is deep enough for several parts, and the part in
// question is made by the first claim of a lock-mode batch that stays open (it delivers its rows,
// then commits): the heads of that part are the batch's uncommitted inserts, and the queue's
// rebuild lock and progress row are the batch's until it ends. Everyone else runs as their
// pgdrain role with lock_timeout 1s, so any wait for the batch fails them with 55P03.

// rebuildBacklogKeys is how many keys the backlogs here have: a part is at least one chunk of 500
// keys and stops after 50 ms (1,500 to 4,000 keys on a test machine), so the rebuild takes several.
const rebuildBacklogKeys = 30000

// A part made by an open lock-mode batch holds up no producer: of a key the batch holds, of a key
// of that part (its head the batch's uncommitted insert), of a key of the part before (committed),
// of a key no part has reached, of new keys inside that part and past every part, nor a producer
// of several of these keys at once, a SERIALIZABLE one, or one under SET CONSTRAINTS ALL IMMEDIATE.
// Afterwards every row is delivered once, per key in commit order, and repair finds nothing.
func TestRebuildPart_MadeByAnOpenLockModeBatch_HoldsUpNoProducer(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, committed := crashedBacklog(t)
	qid := queueIDOf(t, db, "public.events")
	delivered := map[string][]int64{}

	worker := lockTimeout1s(t, loginAs(t, db, "pgdrain_worker"))
	deliverLeased(t, worker, 1, delivered)
	part1End := requireRebuildUnderway(t, db, qid, "the first claim made one part, not the whole rebuild")

	// The next part: made by an open lock-mode batch's first claim.
	batchConn := lockTimeout1s(t, loginAs(t, db, "pgdrain_worker"))
	batch, err := batchConn.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = batch.Rollback(ctx) }()
	held := claimedWithKeys(t, batch, `SELECT id, partition_key FROM outbox.claim_locked('public.events', 2)`)
	require.Len(t, held, 2)

	heldKey := held[0].key
	inPart1 := pendingKeyAfter(t, db, "", 100)
	inPart2 := pendingKeyAfter(t, db, part1End, 250)
	newInPart2 := inPart2 + "x"
	notReached := pendingKeyAfter(t, db, "k29900", 1)
	newPastAll := "z-new"

	producer := lockTimeout1s(t, loginAs(t, db, "pgdrain_producer"))
	commit := func(what string, options pgx.TxOptions, immediate bool, keys ...string) {
		t.Helper()
		tx, err := producer.BeginTx(ctx, options)
		require.NoError(t, err)
		defer func() { _ = tx.Rollback(ctx) }()
		if immediate {
			_, err = tx.Exec(ctx, `SET CONSTRAINTS ALL IMMEDIATE`)
			require.NoError(t, err)
		}
		ids := make([]int64, len(keys))
		for i, k := range keys {
			ids[i] = insertEvent(t, tx, k)
		}
		started := time.Now()
		err = tx.Commit(ctx)
		require.NoError(t, err, "%s committed without waiting for the batch: %s", what, waitDetail(err))
		require.Less(t, time.Since(started), time.Second, "%s committed at once", what)
		for i, k := range keys {
			committed[k] = append(committed[k], ids[i])
		}
	}
	rc := pgx.TxOptions{IsoLevel: pgx.ReadCommitted}
	commit("a producer of a key the batch holds", rc, false, heldKey)
	commit("a producer of a key of the part the batch made", rc, false, inPart2)
	commit("a producer of a key of the part before", rc, false, inPart1)
	commit("a producer of a key no part has reached", rc, false, notReached)
	commit("a producer of a new key inside the part the batch made", rc, false, newInPart2)
	commit("a producer of a new key past every part", rc, false, newPastAll)
	commit("a producer of several keys, inside the part and past it", rc, false,
		notReached, inPart2, heldKey, newPastAll, inPart1, newInPart2)
	commit("a SERIALIZABLE producer", pgx.TxOptions{IsoLevel: pgx.Serializable}, false,
		inPart2, notReached, heldKey, newInPart2)
	commit("a producer under SET CONSTRAINTS ALL IMMEDIATE", rc, true,
		inPart2, notReached, heldKey, newPastAll)

	settleHeld(t, batch, held, delivered)
	require.NoError(t, batch.Commit(ctx))
	part2End := requireRebuildUnderway(t, db, qid, "the batch made one part, not the rest of the rebuild")
	require.Greater(t, part2End, part1End, "the batch's claim made the next part")
	require.Less(t, newInPart2, part2End, "the keys called inside the part are inside it")
	require.Less(t, part2End, notReached, "the key called not reached was not reached")

	drainAndRequireAllDelivered(t, db, qid, committed, delivered)
}

// A second worker beside that open batch claims in lease mode (claim_batch) and in lock mode
// (claim_locked) without waiting for it: it finds the rebuild lock taken and claims from the heads
// that are committed (those of the part before), never a row the batch holds, and each row it gets
// is the first undelivered row of its key.
func TestRebuildPart_MadeByAnOpenLockModeBatch_HoldsUpNoOtherWorker(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, committed := crashedBacklog(t)
	qid := queueIDOf(t, db, "public.events")
	delivered := map[string][]int64{}

	worker := lockTimeout1s(t, loginAs(t, db, "pgdrain_worker"))
	deliverLeased(t, worker, 1, delivered)
	part1End := requireRebuildUnderway(t, db, qid, "the first claim made one part, not the whole rebuild")

	batchConn := lockTimeout1s(t, loginAs(t, db, "pgdrain_worker"))
	batch, err := batchConn.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = batch.Rollback(ctx) }()
	held := claimedWithKeys(t, batch, `SELECT id, partition_key FROM outbox.claim_locked('public.events', 2)`)
	require.Len(t, held, 2)
	heldIDs := map[int64]bool{held[0].id: true, held[1].id: true}

	// Each row a second worker gets must be the first row of its key not delivered yet, and taken
	// by nobody else.
	taken := map[int64]bool{}
	requireFirstUndelivered := func(what string, got []keyedID) {
		t.Helper()
		require.NotEmpty(t, got, "%s claims from the heads the part before made", what)
		for _, c := range got {
			require.False(t, heldIDs[c.id], "%s claimed row %d, which the open batch holds", what, c.id)
			require.False(t, taken[c.id], "%s claimed row %d twice", what, c.id)
			taken[c.id] = true
			require.LessOrEqual(t, c.key, part1End, "%s claims only from committed heads (key %s)", what, c.key)
			next := committed[c.key][len(delivered[c.key])]
			require.Equal(t, next, c.id, "%s claimed key %s's first undelivered row", what, c.key)
		}
	}

	second := lockTimeout1s(t, loginAs(t, db, "pgdrain_worker"))
	type lease struct {
		keyedID
		token string
	}
	rows, err := second.Query(ctx, `SELECT id, partition_key, lease_token::text FROM outbox.claim_batch('public.events', 50)`)
	var leased []lease
	if err == nil {
		leased, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (lease, error) {
			var l lease
			return l, r.Scan(&l.id, &l.key, &l.token)
		})
	}
	require.NoError(t, err, "a second worker's claim_batch beside the open batch: %s; the batch holds %s",
		waitDetail(err), advisoryLocksOf(t, db, int(batchConn.PgConn().PID())))
	leasedIDs := make([]keyedID, len(leased))
	for i, l := range leased {
		leasedIDs[i] = l.keyedID
	}
	requireFirstUndelivered("claim_batch", leasedIDs)
	for _, l := range leased {
		var ok bool
		require.NoError(t, second.QueryRow(ctx, `SELECT outbox.apply_result('public.events', $1, $2::uuid, 'sent')`,
			l.id, l.token).Scan(&ok))
		require.True(t, ok)
		delivered[l.key] = append(delivered[l.key], l.id)
	}

	secondBatch, err := second.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = secondBatch.Rollback(ctx) }()
	rows, err = secondBatch.Query(ctx, `SELECT id, partition_key FROM outbox.claim_locked('public.events', 50)`)
	var locked []keyedID
	if err == nil {
		locked, err = pgx.CollectRows(rows, scanKeyedID)
	}
	require.NoError(t, err, "a second worker's claim_locked beside the open batch: %s; the batch holds %s",
		waitDetail(err), advisoryLocksOf(t, db, int(batchConn.PgConn().PID())))
	requireFirstUndelivered("claim_locked", locked)
	settleHeld(t, secondBatch, locked, delivered)
	require.NoError(t, secondBatch.Commit(ctx))

	settleHeld(t, batch, held, delivered)
	require.NoError(t, batch.Commit(ctx))
	part2End := requireRebuildUnderway(t, db, qid, "the batch made one part, not the rest of the rebuild")
	require.Greater(t, part2End, part1End, "the batch's claim made the next part, the second worker's none")

	drainAndRequireAllDelivered(t, db, qid, committed, delivered)
}

// keyedID is a claimed row: its id and partition key.
type keyedID struct {
	id  int64
	key string
}

func scanKeyedID(r pgx.CollectableRow) (keyedID, error) {
	var c keyedID
	return c, r.Scan(&c.id, &c.key)
}

// crashedBacklog makes public.events (partitioned by resource_id) with a backlog of
// rebuildBacklogKeys keys, k00001 to k30000, one row each and a second row for every tenth key,
// committed in one transaction, and then empties the unlogged state as crash recovery does. It
// returns the rows of each key in commit order.
func crashedBacklog(t *testing.T) (*testdb.DB, map[string][]int64) {
	t.Helper()
	db := orderQueue(t)
	exec(t, db.Pool, `INSERT INTO public.events (event_type, payload, resource_id)
		SELECT 'e', '{}', 'k' || lpad(g::text, 5, '0')
		FROM generate_series(1, 2) r, generate_series(1, $1::int) g
		WHERE r = 1 OR g % 10 = 0
		ORDER BY r, g`, rebuildBacklogKeys)
	exec(t, db.Pool, `VACUUM ANALYZE public.events`)
	committed := rowsByKey(t, db, `TRUE`)
	crashResetAll(t, db)
	return db, committed
}

// rowsByKey returns the ids of public.events's rows matching where, per key, in id order.
func rowsByKey(t *testing.T, db *testdb.DB, where string) map[string][]int64 {
	t.Helper()
	return rowsByKeyQuery(t, db,
		`SELECT resource_id, array_agg(id ORDER BY id) FROM public.events WHERE `+where+` GROUP BY resource_id`)
}

// queueIDOf returns the queue_id of queue.
func queueIDOf(t *testing.T, db *testdb.DB, queue string) int {
	t.Helper()
	var id int
	require.NoError(t, db.Pool.QueryRow(context.Background(),
		`SELECT queue_id FROM outbox.queues WHERE queue = $1`, queue).Scan(&id))
	return id
}

// requireRebuildUnderway requires the heads of queue qid not built yet and a part's progress noted,
// and returns the last key done.
func requireRebuildUnderway(t *testing.T, db *testdb.DB, qid int, why string) string {
	t.Helper()
	var built bool
	var after *string
	require.NoError(t, db.Pool.QueryRow(context.Background(), `
		SELECT EXISTS (SELECT 1 FROM outbox.partition_heads_built WHERE queue_id = $1),
		       (SELECT after_key FROM outbox.partition_heads_restored WHERE queue_id = $1)`, qid).Scan(&built, &after))
	require.False(t, built, "heads not built yet: %s", why)
	require.NotNil(t, after, "a part's progress is noted: %s", why)
	return *after
}

// requireRebuildDone requires the heads of queue qid built and its rebuild progress gone.
func requireRebuildDone(t *testing.T, db *testdb.DB, qid int) {
	t.Helper()
	var built, progress bool
	require.NoError(t, db.Pool.QueryRow(context.Background(), `
		SELECT EXISTS (SELECT 1 FROM outbox.partition_heads_built WHERE queue_id = $1),
		       EXISTS (SELECT 1 FROM outbox.partition_heads_restored WHERE queue_id = $1)`, qid).Scan(&built, &progress))
	require.True(t, built, "the last part marked the heads built")
	require.False(t, progress, "and forgot where the rebuild was")
}

// drainAndRequireAllDelivered drains what is left in lock mode into delivered, then requires the
// heads built, every committed row delivered once, per key in commit order, and nothing for repair.
func drainAndRequireAllDelivered(t *testing.T, db *testdb.DB, qid int, committed, delivered map[string][]int64) {
	t.Helper()
	for k, ids := range drainLocked(t, db) {
		delivered[k] = append(delivered[k], ids...)
	}
	requireRebuildDone(t, db, qid)
	requireEachRowOnceInCommitOrder(t, committed, delivered)
	requireRepairFindsNothing(t, db)
}

// pendingKeyAfter returns the n-th key with unsent rows after key, in key order.
func pendingKeyAfter(t *testing.T, db *testdb.DB, key string, n int) string {
	t.Helper()
	var k string
	require.NoError(t, db.Pool.QueryRow(context.Background(), `
		SELECT resource_id FROM (SELECT DISTINCT resource_id FROM public.events
		                         WHERE sent_at IS NULL AND resource_id > $1 ORDER BY 1 LIMIT $2) s
		ORDER BY 1 DESC LIMIT 1`, key, n).Scan(&k))
	return k
}

// claimedWithKeys runs a claim returning (id, partition_key) and collects them.
func claimedWithKeys(t *testing.T, q interface {
	Query(context.Context, string, ...any) (pgx.Rows, error)
}, sql string, args ...any) []keyedID {
	t.Helper()
	rows, err := q.Query(context.Background(), sql, args...)
	require.NoError(t, err, waitDetail(err))
	got, err := pgx.CollectRows(rows, scanKeyedID)
	require.NoError(t, err, waitDetail(err))
	return got
}

// deliverLeased claims up to n rows with claim_batch on conn and records them as sent, noting them
// in delivered.
func deliverLeased(t *testing.T, conn *pgx.Conn, n int, delivered map[string][]int64) {
	t.Helper()
	ctx := context.Background()
	rows, err := conn.Query(ctx, `SELECT id, partition_key, lease_token::text FROM outbox.claim_batch('public.events', $1)`, n)
	require.NoError(t, err)
	type lease struct {
		id    int64
		key   string
		token string
	}
	leased, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (lease, error) {
		var l lease
		return l, r.Scan(&l.id, &l.key, &l.token)
	})
	require.NoError(t, err, waitDetail(err))
	require.NotEmpty(t, leased)
	for _, l := range leased {
		var ok bool
		require.NoError(t, conn.QueryRow(ctx, `SELECT outbox.apply_result('public.events', $1, $2::uuid, 'sent')`,
			l.id, l.token).Scan(&ok))
		require.True(t, ok, "result of %d recorded", l.id)
		delivered[l.key] = append(delivered[l.key], l.id)
	}
}

// settleHeld records a lock-mode batch's rows as sent and notes them in delivered.
func settleHeld(t *testing.T, batch pgx.Tx, held []keyedID, delivered map[string][]int64) {
	t.Helper()
	ids := make([]int64, len(held))
	for i, h := range held {
		ids[i] = h.id
		delivered[h.key] = append(delivered[h.key], h.id)
	}
	settleClaimed(t, batch, ids, "sent")
}

// drainLocked delivers public.events in lock mode (claim_locked of 1,000, settled as sent, one
// transaction per claim, as the owner) until the heads are built and no key's first deliverable
// row is due, and returns the ids delivered per key, in delivery order; afterEach runs after every
// claim's commit. Claims that find nothing while such rows are left (after the rebuild) fail it
// after a few seconds: those rows are stuck.
func drainLocked(t *testing.T, db *testdb.DB, afterEach ...func()) map[string][]int64 {
	t.Helper()
	ctx := context.Background()
	delivered := map[string][]int64{}
	idle := 0
	for round := 0; round < 2000; round++ {
		tx, err := db.Pool.Begin(ctx)
		require.NoError(t, err)
		got := claimedWithKeys(t, tx, `SELECT id, partition_key FROM outbox.claim_locked('public.events', 1000)`)
		if len(got) > 0 {
			ids := make([]int64, len(got))
			for i, c := range got {
				ids[i] = c.id
				delivered[c.key] = append(delivered[c.key], c.id)
			}
			settleClaimed(t, tx, ids, "sent")
		}
		require.NoError(t, tx.Commit(ctx))
		for _, f := range afterEach {
			f()
		}
		if len(got) > 0 {
			idle = 0
			continue
		}
		var built bool
		var left int
		require.NoError(t, db.Pool.QueryRow(ctx, `
			SELECT EXISTS (SELECT 1 FROM outbox.partition_heads_built b JOIN outbox.queues q USING (queue_id)
			               WHERE q.queue = 'public.events'),
			       (SELECT count(*)::int FROM public.events t, outbox.queues q
			        WHERE q.queue = 'public.events' AND t.sent_at IS NULL AND t.attempt_count < q.max_attempts
			          AND (t.next_attempt_at IS NULL OR t.next_attempt_at <= now())
			          AND (t.leased_until IS NULL OR t.leased_until <= now())
			          AND NOT EXISTS (SELECT 1 FROM public.events e
			                          WHERE e.resource_id = t.resource_id AND e.id < t.id
			                            AND e.sent_at IS NULL AND e.attempt_count < q.max_attempts))`).Scan(&built, &left))
		if built && left == 0 {
			return delivered
		}
		idle++
		if built && idle > 50 {
			var stuck string
			require.NoError(t, db.Pool.QueryRow(ctx, `
				SELECT string_agg(format('%s (id %s)', resource_id, id), ', ' ORDER BY id)
				FROM (SELECT * FROM public.events t WHERE sent_at IS NULL AND attempt_count < 10
				      AND (next_attempt_at IS NULL OR next_attempt_at <= now())
				      AND NOT EXISTS (SELECT 1 FROM public.events e
				                      WHERE e.resource_id = t.resource_id AND e.id < t.id
				                        AND e.sent_at IS NULL AND e.attempt_count < 10)
				      ORDER BY id LIMIT 10) s`).Scan(&stuck))
			t.Fatalf("the heads are built but no claim returns the %d keys' first deliverable rows, due: %s", left, stuck)
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("public.events did not drain")
	return nil
}

// requireEachRowOnceInCommitOrder requires delivered (ids per key, in delivery order) to equal
// committed (ids per key, in commit order), naming the first keys that differ.
func requireEachRowOnceInCommitOrder(t *testing.T, committed, delivered map[string][]int64) {
	t.Helper()
	keys := map[string]bool{}
	for k := range committed {
		keys[k] = true
	}
	for k := range delivered {
		keys[k] = true
	}
	var differ []string
	for k := range keys {
		if fmt.Sprint(committed[k]) != fmt.Sprint(delivered[k]) {
			differ = append(differ, k)
		}
	}
	sort.Strings(differ)
	var detail []string
	for _, k := range differ[:min(len(differ), 10)] {
		detail = append(detail, fmt.Sprintf("%s: committed %v, delivered %v", k, committed[k], delivered[k]))
	}
	require.Empty(t, differ, "every row delivered once, per key in commit order; %d keys differ: %s",
		len(differ), strings.Join(detail, "; "))
}
