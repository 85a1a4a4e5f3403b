package gocheck

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/pgdrain/pgdrain/internal/testdb"
)

// The commit step of a producer transaction (outbox._commit_keys) does one piece of work per
// key it wrote, whatever state the key's head is in: none yet (new key), one a claim left empty
// (fix), or one a claim holds right now (contended: a wake note). Before migration 00015 it picked
// a state's keys out of all the keys with `k = ANY (array)`, comparing every key with every key of
// that state: a bulk load of 32,000 new keys spent 9.6 s there. Measured as plan work
// (auto_explain) of one INSERT ... SELECT as pgdrain_producer, at 1,000 and 8,000 keys. Plan work
// sees rows, not the comparisons inside one expression: the old `= ANY` filter of new keys (a
// sequential search of an array per row) did not show in it, while the old join of emptied heads
// did (2,038 rows per key at 1,000 keys; 8,000 did not finish in ten minutes).
func TestProducers_CommitStepWorkGrowsWithKeysNotKeysSquared(t *testing.T) {
	t.Parallel()
	db := newPlanDB(t)
	ctx := context.Background()
	shapes := []struct {
		name  string
		setup func(t *testing.T, queue string, keys int) func()
	}{
		{"new keys", func(*testing.T, string, int) func() { return func() {} }},
		{"heads a claim left empty", func(t *testing.T, queue string, keys int) func() {
			fillInterleaved(t, db.Pool, queue, keys, keys)
			_, err := db.Pool.Exec(ctx, fmt.Sprintf(`UPDATE %s SET sent_at = now()`, queue))
			require.NoError(t, err)
			_, err = db.Pool.Exec(ctx, `UPDATE outbox.partition_heads SET head_id = NULL
				WHERE queue_id = (SELECT queue_id FROM outbox.queues WHERE queue = $1)`, queue)
			require.NoError(t, err)
			return func() {}
		}},
		{"heads a claim holds", func(t *testing.T, queue string, keys int) func() {
			fillInterleaved(t, db.Pool, queue, keys, keys)
			tx, err := db.Pool.Begin(ctx)
			require.NoError(t, err)
			_, err = tx.Exec(ctx, `SELECT 1 FROM outbox.partition_heads
				WHERE queue_id = (SELECT queue_id FROM outbox.queues WHERE queue = $1) FOR UPDATE`, queue)
			require.NoError(t, err)
			return func() { _ = tx.Rollback(ctx) }
		}},
	}
	for i, shape := range shapes {
		perKey := map[int]float64{}
		for _, keys := range []int{1000, 8000} {
			queue := newQueue(t, db.Pool, fmt.Sprintf("public.commit_%d_%d", i, keys), true)
			_, err := db.Pool.Exec(ctx, "SELECT count(*) FROM outbox.claim_batch($1, 1)", queue) // heads complete
			require.NoError(t, err)
			release := shape.setup(t, queue, keys)
			conn, work := planWorkConn(t, db, "pgdrain_producer")
			_, err = conn.Exec(ctx, fmt.Sprintf(`INSERT INTO %s (event_type, payload, resource_id)
				SELECT 'evt', '{}', 'key-' || (g %% %d) FROM generate_series(1, %d) g`, queue, keys, 2*keys))
			require.NoError(t, err)
			release()
			w := work()
			require.Positive(t, w, "auto_explain reported no plan")
			perKey[keys] = w / float64(keys)
			t.Logf("%s, %d keys: plan work %.0f rows (%.1f per key)", shape.name, keys, w, perKey[keys])
		}
		requireWorkPerKeyFlat(t, "the commit step, "+shape.name, perKey)
	}
}

// newCommitStepQueue makes a partitioned queue of 1,000 keys whose heads are complete (other keys'
// heads and clocks, as in use) and a connection that reports the plans it runs as pgdrain_producer.
func newCommitStepQueue(t *testing.T, db *testdb.DB, queue string) (*pgx.Conn, func() []explainedPlan) {
	t.Helper()
	newQueue(t, db.Pool, queue, true)
	fillInterleaved(t, db.Pool, queue, 1000, 1000)
	_, err := db.Pool.Exec(context.Background(), "SELECT count(*) FROM outbox.claim_batch($1, 1)", queue)
	require.NoError(t, err)
	return explainedConn(t, db, "pgdrain_producer")
}

// commitStepPlans inserts keys rows of new keys (prefix || 1..keys) into queue in one transaction
// and returns the plans of the statements its COMMIT ran whose text contains match.
func commitStepPlans(t *testing.T, conn *pgx.Conn, plans func() []explainedPlan, queue, prefix string, keys int,
	match string) []explainedPlan {
	t.Helper()
	ctx := context.Background()
	tx, err := conn.Begin(ctx)
	require.NoError(t, err)
	_, err = tx.Exec(ctx, fmt.Sprintf(`INSERT INTO %s (event_type, payload, resource_id)
		SELECT 'evt', '{}', '%s' || g FROM generate_series(1, %d) g`, queue, prefix, keys))
	require.NoError(t, err)
	plans() // the INSERT and its heads trigger: not the commit step
	require.NoError(t, tx.Commit(ctx))
	var matched []explainedPlan
	for _, p := range plans() {
		if strings.Contains(p.Query, match) {
			matched = append(matched, p)
		}
	}
	return matched
}

// The commit step asks for each key's head once. Until migration 00022 the probe that sorts keys
// into new, fix and contended (the statement that locks heads FOR KEY SHARE) was inlined into each
// aggregate reading its result, so a new key's head was looked for five times, and the clocks the
// locks had just returned were probed again: 13 buffers per new key and 7 per key with a head,
// where one index probe of the head (and, for a new key, one of the heads' index) needs 4.
// Measured with auto_explain as pgdrain_producer, for 100 new keys and then 100 keys with heads.
func TestProducers_CommitStepAsksForEachHeadOnce(t *testing.T) {
	t.Parallel()
	db := newPlanDB(t)
	queue := "public.commit_probe"
	conn, plans := newCommitStepQueue(t, db, queue)
	const keys = 100
	probeBuffersPerKey := func() float64 {
		t.Helper()
		probes := commitStepPlans(t, conn, plans, queue, "probe-key-", keys, "FOR KEY SHARE SKIP LOCKED")
		require.Len(t, probes, 1, "the commit step should probe the heads in one statement")
		return (probes[0].Plan.SharedHit + probes[0].Plan.SharedRead) / keys
	}
	newKeys := probeBuffersPerKey()
	withHeads := probeBuffersPerKey()
	t.Logf("commit step's head probe, shared buffers per key: %.1f for new keys, %.1f for keys with heads", newKeys, withHeads)
	require.LessOrEqual(t, newKeys, 6.0, "the commit step asked more than once for the heads of new keys")
	require.LessOrEqual(t, withHeads, 6.0, "the commit step asked more than once for the heads of keys that have them")
}

// A new key's head is made only when no wake note waits for the key; until migration 00022 wake
// notes were indexed by queue alone, so that check read every note of the queue, for each new key.
// A lock-mode batch that holds busy heads while their producers commit leaves one note per commit
// (a claim applies them once the heads are free), so a slow batch made every new key's producer
// pay for all of them (5,000 notes: a single-row producer of a new key 0.39 -> 0.79 ms, fsync
// off). With 2,000 notes of other keys, the statement that makes new heads (a single new key's,
// then 100 new keys') reads a few rows per key, not the notes (plan work, see planWorkConn: 2,000
// per key before 00022).
func TestProducers_NewKeysDoNotReadEveryWakeNote(t *testing.T) {
	t.Parallel()
	db := newPlanDB(t)
	queue := "public.commit_wakes"
	conn, plans := newCommitStepQueue(t, db, queue)
	_, err := db.Pool.Exec(context.Background(), `INSERT INTO outbox.partition_wakes (queue_id, partition_key, low_id)
		SELECT queue_id, 'key-' || (g % 1000), g FROM outbox.queues, generate_series(1, 2000) g WHERE queue = $1`, queue)
	require.NoError(t, err)
	headWorkPerKey := func(prefix string, keys int) float64 {
		t.Helper()
		made := commitStepPlans(t, conn, plans, queue, prefix, keys, "INSERT INTO outbox.partition_heads")
		require.Len(t, made, 1, "one statement should make the new heads")
		return made[0].Plan.work() / float64(keys)
	}
	one := headWorkPerKey("wake-single-", 1)
	hundred := headWorkPerKey("wake-bulk-", 100)
	t.Logf("making new heads beside 2,000 wake notes, plan work per key: %.1f (one key), %.1f (100 keys)", one, hundred)
	require.LessOrEqual(t, one, 50.0, "a single new key's head read the queue's wake notes")
	require.LessOrEqual(t, hundred, 50.0, "new keys' heads read the queue's wake notes")
}
