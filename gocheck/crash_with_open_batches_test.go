package gocheck

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/pgdrain/pgdrain/internal/testdb"
)

// TestCrash_ImmediateStopWithOpenBatchesOfBothModes crashes the server (pg_ctl stop -m immediate)
// while a lock-mode batch holds rows it has settled but not committed, lease-mode leases are held
// (a run among them), a row is backing off and another is poisoned. After recovery (partition heads
// empty: the unlogged tables are reset) an operator acts before any claim has rebuilt them
// (retry_row of the backing-off head, poison_row of a head, release_lease of a held lease), and then
// workers of both modes, least privileged, drain the queue: the settled rows of the lost batch are
// delivered again (nothing of it was recorded), every event is sent except the poisoned ones, per
// key in id order, the held leases' late results are refused once their rows were claimed again,
// and outbox.repair (dry run) finds nothing.
func TestCrash_ImmediateStopWithOpenBatchesOfBothModes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	cluster := startOwnCluster(t)
	admin, err := pgx.Connect(ctx, cluster.postgresURL)
	require.NoError(t, err)
	_, err = admin.Exec(ctx, `CREATE DATABASE crash`)
	require.NoError(t, err)
	// The cluster runs with synchronous_commit off; what this test committed must survive the crash.
	_, err = admin.Exec(ctx, `ALTER DATABASE crash SET synchronous_commit = on`)
	require.NoError(t, err)
	require.NoError(t, admin.Close(ctx))
	url := testdb.WithDatabase(cluster.postgresURL, "crash")
	require.NoError(t, testdb.MigrateUp(ctx, url))
	owner, err := pgxpool.New(ctx, url)
	require.NoError(t, err)
	const keys, perKey = 40, 5
	for _, stmt := range []string{
		`SELECT outbox.create_queue('public.crash', 'k', backoff_min => '10 milliseconds', backoff_max => '50 milliseconds')`,
		fmt.Sprintf(`INSERT INTO public.crash (event_type, payload, k)
			SELECT 'e', jsonb_build_object('n', n), 'k' || lpad(g::text, 3, '0')
			FROM generate_series(1, %d) n, generate_series(1, %d) g ORDER BY n, g`, perKey, keys),
		// k001's head backs off for an hour; k002's head is poisoned; the other heads are given back.
		`SELECT CASE WHEN c.partition_key IN ('k001', 'k002') THEN outbox.apply_result('public.crash', c.id, c.lease_token,
			  CASE c.partition_key WHEN 'k001' THEN 'transient' ELSE 'permanent' END, 'peer',
			  CASE c.partition_key WHEN 'k001' THEN clock_timestamp() + interval '1 hour' END)
			ELSE outbox.release('public.crash', c.id, c.lease_token) END
		 FROM outbox.claim_batch('public.crash', 100) c`,
	} {
		_, err = owner.Exec(ctx, stmt)
		require.NoError(t, err, stmt)
	}
	defer owner.Close() // reconnects after the restart
	roles := &testdb.DB{URL: url, Pool: owner}
	workerURL, operatorURL := loginURL(t, roles, "pgdrain_worker"), loginURL(t, roles, "pgdrain_operator")

	worker := func() *pgx.Conn {
		c, err := pgx.Connect(ctx, workerURL)
		require.NoError(t, err)
		return c
	}
	// Lease mode: runs of 8 keys held (3 seconds, past the crash), their tokens kept for late results.
	lw := worker()
	type held struct {
		id    int64
		token string
	}
	var leases []held
	rows, err := lw.Query(ctx, `SELECT id, lease_token::text FROM outbox.claim_runs('public.crash', 16, '3 seconds', 2)`)
	require.NoError(t, err)
	for rows.Next() {
		var h held
		require.NoError(t, rows.Scan(&h.id, &h.token))
		leases = append(leases, h)
	}
	require.NoError(t, rows.Err())
	require.NotEmpty(t, leases)
	// Lock mode: a batch claims runs of the other keys and settles them, never committed.
	bw := worker()
	batch, err := bw.Begin(ctx)
	require.NoError(t, err)
	var settled int64
	require.NoError(t, batch.QueryRow(ctx, `SELECT outbox.settle_locked('public.crash', array_agg(id), array_fill('sent'::text, ARRAY[count(*)::int]))
		FROM outbox.claim_locked_runs('public.crash', 40, 3)`).Scan(&settled))
	require.Positive(t, settled)

	require.NoError(t, cluster.pgCtl("stop", "-m", "immediate"))
	// Started again on the same port; the pool's connections died with the server.
	require.NoError(t, cluster.pgCtl("start"))
	owner.Reset()
	_ = lw.Close(ctx)
	_ = bw.Close(ctx)

	var rebuilding bool
	require.NoError(t, owner.QueryRow(ctx, `SELECT rebuilding FROM outbox.heads_rebuild('public.crash')`).Scan(&rebuilding))
	require.True(t, rebuilding, "crash recovery emptied the partition heads")

	// The operator acts before any claim rebuilt the heads.
	op, err := pgx.Connect(ctx, operatorURL)
	require.NoError(t, err)
	defer func() { _ = op.Close(ctx) }()
	var retried, poisoned, released bool
	var k001Head, k040Head int64
	require.NoError(t, owner.QueryRow(ctx, `SELECT min(id) FILTER (WHERE k = 'k001'), min(id) FILTER (WHERE k = 'k040') FROM public.crash`).Scan(&k001Head, &k040Head))
	require.NoError(t, op.QueryRow(ctx, `SELECT outbox.retry_row('public.crash', $1, 1, 'peer fixed')`, k001Head).Scan(&retried))
	require.True(t, retried, "retry_row ends the backoff of k001's head")
	require.NoError(t, op.QueryRow(ctx, `SELECT outbox.poison_row('public.crash', $1, 0, 'skip it')`, k040Head).Scan(&poisoned))
	require.True(t, poisoned, "poison_row skips k040's head")
	require.NoError(t, op.QueryRow(ctx, `SELECT outbox.release_lease('public.crash', $1)`, leases[0].id).Scan(&released))
	require.True(t, released, "release_lease ends a lease held across the crash")

	// Workers of both modes drain, recording the order per key.
	w := worker()
	defer func() { _ = w.Close(ctx) }()
	order := map[string][]int64{}
	deadline := time.Now().Add(30 * time.Second)
	for round := 0; time.Now().Before(deadline); round++ {
		var n int
		if round%2 == 0 {
			rows, err := w.Query(ctx, `SELECT c.partition_key, c.id, outbox.apply_result('public.crash', c.id, c.lease_token, 'sent')
				FROM (SELECT * FROM outbox.claim_runs('public.crash', 10, '1 minute', 3) ORDER BY id) c`)
			require.NoError(t, err)
			for rows.Next() {
				var k string
				var id int64
				var ok bool
				require.NoError(t, rows.Scan(&k, &id, &ok))
				require.True(t, ok)
				order[k] = append(order[k], id)
				n++
			}
			require.NoError(t, rows.Err())
		} else {
			tx, err := w.Begin(ctx)
			require.NoError(t, err)
			rows, err := tx.Query(ctx, `SELECT partition_key, id FROM outbox.claim_locked('public.crash', 10) ORDER BY id`)
			require.NoError(t, err)
			var ids []int64
			for rows.Next() {
				var k string
				var id int64
				require.NoError(t, rows.Scan(&k, &id))
				order[k] = append(order[k], id)
				ids = append(ids, id)
			}
			require.NoError(t, rows.Err())
			if len(ids) > 0 {
				_, err = tx.Exec(ctx, `SELECT outbox.settle_locked('public.crash', $1::bigint[], array_fill('sent'::text, ARRAY[cardinality($1::bigint[])]))`, ids)
				require.NoError(t, err)
			}
			require.NoError(t, tx.Commit(ctx))
			n = len(ids)
		}
		var pending int64
		require.NoError(t, owner.QueryRow(ctx, `SELECT count(*) FROM public.crash WHERE sent_at IS NULL AND attempt_count < 10`).Scan(&pending))
		if pending == 0 {
			break
		}
		if n == 0 {
			time.Sleep(20 * time.Millisecond)
		}
	}
	var unsent, poisonedRows int64
	require.NoError(t, owner.QueryRow(ctx, `SELECT count(*) FILTER (WHERE sent_at IS NULL AND attempt_count < 10),
		count(*) FILTER (WHERE sent_at IS NULL AND attempt_count >= 10) FROM public.crash`).Scan(&unsent, &poisonedRows))
	require.Zero(t, unsent, "every deliverable event is delivered after the crash")
	require.Equal(t, int64(2), poisonedRows, "k002's and k040's heads stay poisoned")
	for k, ids := range order {
		for i := 1; i < len(ids); i++ {
			require.Less(t, ids[i-1], ids[i], "key %s delivered in id order: %v", k, ids)
		}
	}
	for _, h := range leases {
		var ok bool
		require.NoError(t, w.QueryRow(ctx, `SELECT outbox.apply_result('public.crash', $1, $2::uuid, 'sent')`, h.id, h.token).Scan(&ok))
		require.False(t, ok, "the late result of a lease held across the crash is refused once its row was claimed again (id %d)", h.id)
	}
	var repairs int64
	require.NoError(t, owner.QueryRow(ctx, `SELECT count(*) FROM outbox.repair('public.crash', true)`).Scan(&repairs))
	require.Zero(t, repairs, "outbox.repair finds nothing")
	require.NoError(t, owner.QueryRow(ctx, `SELECT rebuilding FROM outbox.heads_rebuild('public.crash')`).Scan(&rebuilding))
	require.False(t, rebuilding, "the claims rebuilt the heads")
}
