package gocheck

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/pgdrain/pgdrain/drainer"
)

// Seed 001's named tests: the width of the partition key, and what an unpartitioned
// register/unregister outbox does to a mirror that is versioned only on its upsert branch.

// resourceMirrorSQL is seed 001's resource_mirror: register upserts with source_version LWW (which
// guards only the ON CONFLICT DO UPDATE branch), unregister is a hard DELETE without a tombstone.
const resourceMirrorSQL = `CREATE TABLE public.resource_mirror (
  resource_id text PRIMARY KEY,
  source_version bigint NOT NULL)`

func mirrorApply(pool *pgxpool.Pool) func(ctx context.Context, e drEvent) error {
	return func(ctx context.Context, e drEvent) error {
		var err error
		switch e.Op {
		case "register":
			_, err = pool.Exec(ctx, `
				INSERT INTO public.resource_mirror AS m (resource_id, source_version) VALUES ($1, $2)
				ON CONFLICT (resource_id) DO UPDATE SET source_version = EXCLUDED.source_version
				WHERE m.source_version < EXCLUDED.source_version`, e.Key, e.Seq)
		case "unregister":
			_, err = pool.Exec(ctx, `DELETE FROM public.resource_mirror WHERE resource_id = $1`, e.Key)
		default:
			err = drainer.Permanent(fmt.Errorf("unknown op %q", e.Op))
		}
		return err
	}
}

// Test_1_4_45_RegisterOutbox_UnregisterThenStaleRegister: register(t1) then unregister(t2) of one
// resource; the register's first delivery fails transiently. Without a PartitionColumn the
// unregister (fresh, attempt 0) overtakes the retried register, deletes nothing, and the stale
// register then INSERTs: the mirror row of a deleted resource is resurrected. With resource_id as
// the PartitionColumn the unregister waits for its predecessor and the end state is ABSENT.
func Test_1_4_45_RegisterOutbox_UnregisterThenStaleRegister(t *testing.T) {
	t.Parallel()
	for _, partitioned := range []bool{false, true} {
		name := "without_partition_column_resurrects"
		if partitioned {
			name = "with_resource_id_partition_column_absent"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			drEachMode(t, func(t *testing.T, mode drainer.ClaimMode) {
				opts := drQueueOpts{}
				if partitioned {
					opts.partitionColumn = "resource_id"
				}
				q := drNewQueue(t, opts)
				ctx := context.Background()
				_, err := q.pool.Exec(ctx, resourceMirrorSQL)
				require.NoError(t, err)
				registerID := q.enqueue(t, "res-1", "register", 1)
				unregisterID := q.enqueue(t, "res-1", "unregister", 2)

				var log drLog
				var failedOnce atomic.Bool
				apply := mirrorApply(q.pool)
				cfg := q.config(mode)
				d, _ := drNew(t, q.pool, cfg, func(ctx context.Context, _ string, e drEvent) error {
					log.add(ctx, e)
					if e.Op == "register" && failedOnce.CompareAndSwap(false, true) {
						return errors.New("iam: connection reset (transient)")
					}
					return apply(ctx, e)
				})
				stop := drStart(t, d)
				drWaitFor(t, 10*time.Second, "both events sent", func() bool { return q.sent(t) == 2 })
				require.NoError(t, stop())

				_, ids := log.snapshot()
				present := q.count(t, `SELECT count(*) FROM public.resource_mirror WHERE resource_id = 'res-1'`)
				if !partitioned {
					require.Equal(t, []int64{registerID, unregisterID, registerID}, ids,
						"the unregister overtakes the transiently failed register")
					require.EqualValues(t, 1, present,
						"without a PartitionColumn the stale register resurrects the deleted resource's mirror row")
				} else {
					require.Equal(t, []int64{registerID, registerID, unregisterID}, ids,
						"the unregister waits for its partition's predecessor")
					require.EqualValues(t, 0, present, "with resource_id as PartitionColumn the end state is ABSENT")
				}
			})
		})
	}
}

// tuplesSQL is a raw-tuple target (the iam fga_outbox case): WRITE and DELETE of one
// (user, relation, object) do not commute; different tuples of one object do.
const tuplesSQL = `
CREATE TABLE public.tuples (tuple_key text PRIMARY KEY);
CREATE TABLE public.apply_log (n bigserial PRIMARY KEY, tuple_key text NOT NULL, event_id bigint NOT NULL, op text NOT NULL);`

func tupleApply(pool *pgxpool.Pool) func(ctx context.Context, e drEvent) error {
	return func(ctx context.Context, e drEvent) error {
		ev, _ := drainer.EventFrom(ctx)
		var sql string
		switch e.Op {
		case "WRITE":
			sql = `INSERT INTO public.tuples VALUES ($1) ON CONFLICT DO NOTHING`
		case "DELETE":
			sql = `DELETE FROM public.tuples WHERE tuple_key = $1`
		default:
			return drainer.Permanent(fmt.Errorf("unknown op %q", e.Op))
		}
		b := []string{sql, `INSERT INTO public.apply_log (tuple_key, event_id, op) VALUES ($1, $2, $3)`}
		tx, err := pool.Begin(ctx)
		if err != nil {
			return err
		}
		defer tx.Rollback(context.WithoutCancel(ctx))
		if _, err := tx.Exec(ctx, b[0], e.Key); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, b[1], e.Key, ev.ID, e.Op); err != nil {
			return err
		}
		return tx.Commit(ctx)
	}
}

// tupleKey renders the narrow key (user, relation, object), as a trigger would materialize it.
func tupleKey(user, object string) string { return "user:" + user + " viewer " + object }

// Test_1_4_46_PartitionKey_SameObject_DistinctSubjects_StayConcurrent: grants of one object to
// distinct users are distinct tuples and commute, so on the narrow key (the tuple) each is its own
// partition: one claim takes them all and they are applied at the same time. The control shows
// what the wide key (the object) would do: exactly one claimable head.
func Test_1_4_46_PartitionKey_SameObject_DistinctSubjects_StayConcurrent(t *testing.T) {
	t.Parallel()
	const subjects = 16
	drEachMode(t, func(t *testing.T, mode drainer.ClaimMode) {
		ctx := context.Background()
		q := drNewQueue(t, drQueueOpts{partitionColumn: "tuple_key"})
		_, err := q.pool.Exec(ctx, `SELECT outbox.create_queue('public.events_by_object', 'object')`)
		require.NoError(t, err)
		for _, table := range []string{"public.events", "public.events_by_object"} {
			col := map[string]string{"public.events": "tuple_key", "public.events_by_object": "object"}[table]
			_, err := q.pool.Exec(ctx, fmt.Sprintf(`
				INSERT INTO %s (event_type, payload, %s)
				SELECT 'WRITE', jsonb_build_object('key', k, 'op', 'WRITE', 'seq', i), %s
				FROM generate_series(1, %d) i,
				     LATERAL (SELECT 'user:u' || i || ' viewer vpc_network:P' AS k) s`,
				table, col, map[string]string{"tuple_key": "k", "object": "'vpc_network:P'"}[col], subjects))
			require.NoError(t, err)
		}

		// Control: on the wide key only the object's single head is claimable.
		require.EqualValues(t, 1, drClaimCount(t, q.pool, mode, "public.events_by_object", subjects),
			"wide key: one claimable head per object")

		var inFlight, maxInFlight atomic.Int32
		all := make(chan struct{})
		var closeAll sync.Once
		cfg := q.config(mode)
		cfg.ApplyConcurrency = subjects
		cfg.ApplyTimeout = 5 * time.Second
		cfg.Lease = 0
		d, reg := drNew(t, q.pool, cfg, func(ctx context.Context, _ string, e drEvent) error {
			n := inFlight.Add(1)
			defer inFlight.Add(-1)
			for m := maxInFlight.Load(); n > m && !maxInFlight.CompareAndSwap(m, n); m = maxInFlight.Load() {
			}
			if n == subjects {
				closeAll.Do(func() { close(all) })
			}
			select { // wait for the others: only concurrent applies get past without the timeout
			case <-all:
			case <-time.After(3 * time.Second):
			}
			return nil
		})
		stop := drStart(t, d)
		drWaitFor(t, 15*time.Second, "all grants sent", func() bool { return q.sent(t) == subjects })
		require.NoError(t, stop())
		// A drainer applies one batch at a time, so all of them in flight at once means one claim
		// took every head and nothing waited behind another grant of the same object.
		require.EqualValues(t, subjects, maxInFlight.Load(), "narrow key: every grant of the object applied at once")
		require.Equal(t, float64(subjects), drResults(t, reg, "sent"))
	})
}

// drClaimCount claims (and gives back) up to n rows of table in mode, returning how many it got.
func drClaimCount(t *testing.T, pool *pgxpool.Pool, mode drainer.ClaimMode, table string, n int) int64 {
	t.Helper()
	ctx := context.Background()
	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	defer tx.Rollback(ctx)
	var got int64
	if mode == drainer.ClaimLock {
		err = tx.QueryRow(ctx, `SELECT count(*) FROM outbox.claim_locked($1, $2)`, table, n).Scan(&got)
	} else {
		err = tx.QueryRow(ctx, `SELECT count(*) FROM outbox.claim_batch($1, $2, '5 seconds')`, table, n).Scan(&got)
	}
	require.NoError(t, err)
	return got
}

// Test_1_4_47_NarrowKey_PreservesOrder_UnderSameObjectNoise: WRITE then DELETE of one tuple, the
// WRITE failing once transiently, amid grants of the same object to other users (before, between
// and after). On the narrow key the DELETE still waits for its WRITE, so the tuple ends ABSENT (no
// over-grant), and the noise is not serialized behind the stuck tuple: all of it is applied while
// the WRITE sits in its backoff.
func Test_1_4_47_NarrowKey_PreservesOrder_UnderSameObjectNoise(t *testing.T) {
	t.Parallel()
	drEachMode(t, func(t *testing.T, mode drainer.ClaimMode) {
		ctx := context.Background()
		q := drNewQueue(t, drQueueOpts{partitionColumn: "tuple_key", backoffMin: time.Second, backoffMax: time.Second})
		_, err := q.pool.Exec(ctx, tuplesSQL)
		require.NoError(t, err)
		target := tupleKey("a", "vpc_network:P")
		noise := 0
		addNoise := func(n int) {
			for range n {
				noise++
				q.enqueue(t, tupleKey(fmt.Sprintf("n%d", noise), "vpc_network:P"), "WRITE", noise)
			}
		}
		addNoise(10)
		writeID := q.enqueue(t, target, "WRITE", 1)
		addNoise(10)
		deleteID := q.enqueue(t, target, "DELETE", 2)
		addNoise(10)

		var failedOnce atomic.Bool
		apply := tupleApply(q.pool)
		cfg := q.config(mode)
		cfg.ApplyConcurrency = 8
		d, _ := drNew(t, q.pool, cfg, func(ctx context.Context, _ string, e drEvent) error {
			if e.Key == target && e.Op == "WRITE" && failedOnce.CompareAndSwap(false, true) {
				return errors.New("openfga: 503 (transient)")
			}
			return apply(ctx, e)
		})
		stop := drStart(t, d)
		drWaitFor(t, 15*time.Second, "every event sent", func() bool { return q.sent(t) == int64(noise+2) })
		require.NoError(t, stop())

		require.EqualValues(t, 0, q.count(t, `SELECT count(*) FROM public.tuples WHERE tuple_key = $1`, target),
			"the revoked tuple is absent: DELETE applied after its WRITE")
		rows, err := q.pool.Query(ctx, `SELECT event_id FROM public.apply_log WHERE tuple_key = $1 ORDER BY n`, target)
		require.NoError(t, err)
		var order []int64
		for rows.Next() {
			var id int64
			require.NoError(t, rows.Scan(&id))
			order = append(order, id)
		}
		require.NoError(t, rows.Err())
		require.Equal(t, []int64{writeID, deleteID}, order)
		require.EqualValues(t, noise, q.count(t, `SELECT count(*) FROM public.tuples WHERE tuple_key <> $1`, target),
			"every same-object grant of another user applied")
		require.EqualValues(t, noise, q.count(t, `
			SELECT count(*) FROM public.apply_log n
			WHERE n.tuple_key <> $1
			  AND n.n < (SELECT w.n FROM public.apply_log w WHERE w.event_id = $2)`, target, writeID),
			"no same-object noise waited behind the tuple stuck in backoff")
	})
}

// Test_1_4_48_NarrowKey_OrderHolds_AcrossReplicas: three drainers (each with its own pool, like
// three processes) drain WRITE/DELETE sequences of many tuples inserted in several transactions
// while they run, with transient failures sprinkled in. For every tuple, the successful applies
// follow id order exactly (each once), and the final state is that of its last event.
func Test_1_4_48_NarrowKey_OrderHolds_AcrossReplicas(t *testing.T) {
	t.Parallel()
	const (
		replicas = 3
		keys     = 20
		rounds   = 6
	)
	drEachMode(t, func(t *testing.T, mode drainer.ClaimMode) {
		ctx := context.Background()
		q := drNewQueue(t, drQueueOpts{partitionColumn: "tuple_key"})
		_, err := q.pool.Exec(ctx, tuplesSQL)
		require.NoError(t, err)
		targetPool := drPool(t, q.db.URL, 16)
		// Connected before the replicas start: on 2 busy cores twelve connections opened at once
		// by the first applies took up to 500 ms, their ApplyTimeout, and a lock-mode batch that
		// outlives LockTransactionTimeout is claimed again (at least once, not this test's subject).
		drWarmPool(t, targetPool, replicas*4)
		apply := tupleApply(targetPool)

		var perReplica [replicas]atomic.Int64
		var pools [replicas]*pgxpool.Pool
		for r := range replicas {
			cfg := q.config(mode)
			cfg.ApplyConcurrency = 4
			pools[r] = drPool(t, q.db.URL, 8)
			d, _ := drNew(t, pools[r], cfg, func(ctx context.Context, _ string, e drEvent) error {
				ev, _ := drainer.EventFrom(ctx)
				time.Sleep(2 * time.Millisecond) // a peer round trip, so replicas overlap
				if ev.Attempts == 0 && drFlaky(ev.ID) {
					return errors.New("peer: 503 (transient)")
				}
				if err := apply(ctx, e); err != nil {
					return err
				}
				perReplica[r].Add(1)
				return nil
			})
			drStart(t, d)
		}
		// Every replica started (it listens) before the events, which are all written within
		// 150 ms: a replica still connecting would leave its share to the others.
		drWaitFor(t, 10*time.Second, "every replica listening", func() bool {
			for _, p := range pools {
				if drainer.ListenerPID(p) == 0 {
					return false
				}
			}
			return true
		})

		last := map[string]string{}
		for round := range rounds {
			op := "WRITE"
			if round%2 == 1 {
				op = "DELETE"
			}
			tx, err := q.pool.Begin(ctx)
			require.NoError(t, err)
			for k := range keys {
				key := tupleKey(fmt.Sprintf("u%d", k), "vpc_network:P")
				_, err := tx.Exec(ctx, `SELECT outbox.enqueue('public.events', $1, jsonb_build_object('key', $2::text, 'op', $1::text, 'seq', $3::int), $2)`,
					op, key, round)
				require.NoError(t, err)
				last[key] = op
			}
			require.NoError(t, tx.Commit(ctx))
			time.Sleep(20 * time.Millisecond)
		}
		drWaitFor(t, 30*time.Second, "every event sent", func() bool { return q.sent(t) == keys*rounds })

		rows, err := q.pool.Query(ctx, `
			SELECT l.tuple_key, array_agg(l.event_id ORDER BY l.n),
			       (SELECT array_agg(e.id ORDER BY e.id) FROM public.events e WHERE e.tuple_key = l.tuple_key)
			FROM public.apply_log l GROUP BY l.tuple_key`)
		require.NoError(t, err)
		defer rows.Close()
		seen := 0
		for rows.Next() {
			var key string
			var applied, ids []int64
			require.NoError(t, rows.Scan(&key, &applied, &ids))
			require.Equalf(t, ids, applied, "tuple %s: successful applies in id order, each once", key)
			seen++
		}
		require.NoError(t, rows.Err())
		require.Equal(t, keys, seen)
		var present []string
		for key, op := range last {
			if op == "WRITE" {
				present = append(present, key)
			}
		}
		sort.Strings(present)
		var got []string
		rows, err = q.pool.Query(ctx, `SELECT tuple_key FROM public.tuples ORDER BY tuple_key COLLATE "C"`)
		require.NoError(t, err)
		for rows.Next() {
			var k string
			require.NoError(t, rows.Scan(&k))
			got = append(got, k)
		}
		require.NoError(t, rows.Err())
		require.Equal(t, present, got, "the final state is each tuple's last event")
		working, counts := 0, make([]int64, replicas)
		for r := range replicas {
			counts[r] = perReplica[r].Load()
			if counts[r] > 0 {
				working++
			}
		}
		require.GreaterOrEqual(t, working, 2, "the replicas shared the work (applies per replica: %v)", counts)
	})
}

// drFlaky picks about a quarter of the events, by id, to fail their first delivery.
func drFlaky(id int64) bool {
	h := fnv.New32a()
	fmt.Fprint(h, id)
	return h.Sum32()%4 == 0
}

// drPool opens a separate pool on url, as another process would.
// drWarmPool opens n connections of pool (and keeps them idle in it).
func drWarmPool(t *testing.T, pool *pgxpool.Pool, n int) {
	t.Helper()
	conns := make([]*pgxpool.Conn, 0, n)
	for range n {
		c, err := pool.Acquire(context.Background())
		require.NoError(t, err)
		conns = append(conns, c)
	}
	for _, c := range conns {
		c.Release()
	}
}

func drPool(t *testing.T, url string, maxConns int32) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(url)
	require.NoError(t, err)
	cfg.MaxConns = maxConns
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	return pool
}
