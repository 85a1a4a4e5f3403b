package gocheck

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/pgdrain/pgdrain/internal/testdb"
)

// Registration follows the table (issue 11, item 4): what users do to a queue table outside
// pgdrain — DROP TABLE, DROP SCHEMA ... CASCADE, TRUNCATE, TRUNCATE ... RESTART IDENTITY — and then
// the same queue made again leaves no heads, built-marks or clocks behind that affect the new rows.

// insertInto inserts one event of key with payload {"tx": mark} into queue (a trusted constant, partitioned
// by resource_id) and returns the id its insert saw.
func insertInto(t *testing.T, q interface {
	QueryRow(context.Context, string, ...any) pgx.Row
}, queue, key, mark string) int64 {
	t.Helper()
	var id int64
	require.NoError(t, q.QueryRow(context.Background(), fmt.Sprintf(
		`INSERT INTO %s (event_type, payload, resource_id) VALUES ('e', jsonb_build_object('tx', $2::text), $1)
		 RETURNING id`, queue), key, mark).Scan(&id))
	return id
}

// drainQueue claims everything claimable now in one claim cycle and records it as sent; it returns
// the delivered marks per key, in delivery order, and every delivered id per key.
func drainQueue(t *testing.T, pool *pgxpool.Pool, queue string) (map[string][]string, map[string][]int64) {
	t.Helper()
	ctx := context.Background()
	marks, ids := map[string][]string{}, map[string][]int64{}
	for {
		rows, err := pool.Query(ctx, `SELECT id, lease_token, partition_key, coalesce(payload->>'tx', '') FROM outbox.claim_batch($1, 100)`, queue)
		require.NoError(t, err)
		type claimed struct {
			id      int64
			token   [16]byte
			key, tx string
		}
		batch, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (claimed, error) {
			var c claimed
			return c, r.Scan(&c.id, &c.token, &c.key, &c.tx)
		})
		require.NoError(t, err)
		if len(batch) == 0 {
			return marks, ids
		}
		for _, c := range batch {
			var ok bool
			require.NoError(t, pool.QueryRow(ctx, `SELECT outbox.apply_result($1, $2, $3, 'sent')`, queue, c.id, c.token).Scan(&ok))
			require.True(t, ok)
			marks[c.key] = append(marks[c.key], c.tx)
			ids[c.key] = append(ids[c.key], c.id)
		}
	}
}

// After each way of resetting a partitioned queue's table outside pgdrain (with committed rows, and
// leased heads, before it), the queue made again delivers every new row in one claim cycle, in
// commit order per key: producer A takes the smaller id of key k1, B the larger, B commits first.
func TestRegistration_ResetQueueDeliversEveryNewRowInCommitOrder(t *testing.T) {
	t.Parallel()
	resets := []struct {
		name, sql string
		recreate  bool // create_queue must be called again (the table is a new one)
	}{
		{"drop table", `DROP TABLE app.events`, true},
		{"drop schema cascade", `DROP SCHEMA app CASCADE; CREATE SCHEMA app`, true},
		{"truncate", `TRUNCATE app.events`, false},
		{"truncate restart identity", `TRUNCATE app.events RESTART IDENTITY`, false},
		{"truncate restart identity, create_queue again", `TRUNCATE app.events RESTART IDENTITY`, true},
	}
	for _, reset := range resets {
		t.Run(reset.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			db := testdb.New(t)
			exec := func(q string) {
				t.Helper()
				_, err := db.Pool.Exec(ctx, q)
				require.NoError(t, err)
			}
			exec(`CREATE SCHEMA app`)
			exec(`SELECT outbox.create_queue('app.events', 'resource_id')`)
			for i := 0; i < 5; i++ {
				insertInto(t, db.Pool, "app.events", "k1", "old")
				insertInto(t, db.Pool, "app.events", "k2", "old")
			}
			// Lease both heads (parked), and leave them leased.
			var claimed int
			require.NoError(t, db.Pool.QueryRow(ctx, `SELECT count(*) FROM outbox.claim_batch('app.events', 10)`).Scan(&claimed))
			require.Equal(t, 2, claimed)

			exec(reset.sql)
			if reset.recreate {
				exec(`SELECT outbox.create_queue('app.events', 'resource_id')`)
			}

			a, b := beginTx(t, db.Pool), beginTx(t, db.Pool)
			insertInto(t, a, "app.events", "k1", "A")
			insertInto(t, b, "app.events", "k1", "B")
			require.NoError(t, b.Commit(ctx))
			require.NoError(t, a.Commit(ctx))
			insertInto(t, db.Pool, "app.events", "k2", "C")

			marks, ids := drainQueue(t, db.Pool, "app.events")
			require.Equal(t, map[string][]string{"k1": {"B", "A"}, "k2": {"C"}}, marks,
				"every new row is delivered in one claim cycle, in commit order per key")
			requireIDsAscending(t, ids["k1"])
			var pending int64
			require.NoError(t, db.Pool.QueryRow(ctx, `SELECT pending FROM outbox.stats('app.events')`).Scan(&pending))
			require.Zero(t, pending)
		})
	}
}

// A producer transaction that truncates its queue table after writing to it commits only what it
// wrote afterwards: the keys it noted for its commit step go with the TRUNCATE, so no head or clock
// is made for a key whose rows are gone (such a head would point at another key's row, with a floor).
func TestRegistration_TruncateInTheProducingTransactionForgetsItsKeys(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testdb.New(t)
	_, err := db.Pool.Exec(ctx, `CREATE SCHEMA app; SELECT outbox.create_queue('app.events', 'resource_id')`)
	require.NoError(t, err)
	tx := beginTx(t, db.Pool)
	for i := 0; i < 5; i++ {
		insertInto(t, tx, "app.events", "gone", "gone")
	}
	_, err = tx.Exec(ctx, `TRUNCATE app.events RESTART IDENTITY`)
	require.NoError(t, err)
	first := insertInto(t, tx, "app.events", "k1", "kept")
	require.NoError(t, tx.Commit(ctx))
	require.EqualValues(t, 1, first)

	var heads []string
	var clocks int
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT array_agg(partition_key ORDER BY partition_key),
		(SELECT count(*) FROM outbox.partition_clocks) FROM outbox.partition_heads`).Scan(&heads, &clocks))
	require.Equal(t, []string{"k1"}, heads, "only the committed row's key has a head")
	require.Equal(t, 1, clocks, "and a clock")
	insertInto(t, db.Pool, "app.events", "k1", "next")
	var final []int64
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT array_agg(id ORDER BY id) FROM app.events`).Scan(&final))
	require.Equal(t, []int64{1, 2}, final, "nothing was renumbered")
	marks, _ := drainQueue(t, db.Pool, "app.events")
	require.Equal(t, map[string][]string{"k1": {"kept", "next"}}, marks)
}

// A producer transaction may drop the queue table it wrote to (a test teardown, a dev reset): its
// commit step then has nothing to order and the transaction commits; the queue made again in the
// same transaction delivers what was written after.
func TestRegistration_ProducerThatDropsItsQueueTableCommits(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testdb.New(t)
	_, err := db.Pool.Exec(ctx, `CREATE SCHEMA app; SELECT outbox.create_queue('app.events', 'resource_id')`)
	require.NoError(t, err)

	tx := beginTx(t, db.Pool)
	insertInto(t, tx, "app.events", "k1", "gone")
	_, err = tx.Exec(ctx, `DROP TABLE app.events`)
	require.NoError(t, err)
	require.NoError(t, tx.Commit(ctx), "a producer that dropped its queue table commits")

	tx = beginTx(t, db.Pool)
	_, err = tx.Exec(ctx, `SELECT outbox.create_queue('app.events', 'resource_id')`)
	require.NoError(t, err)
	insertInto(t, tx, "app.events", "k1", "gone")
	_, err = tx.Exec(ctx, `DROP TABLE app.events; SELECT outbox.create_queue('app.events', 'resource_id')`)
	require.NoError(t, err)
	insertInto(t, tx, "app.events", "k2", "kept")
	require.NoError(t, tx.Commit(ctx))
	marks, _ := drainQueue(t, db.Pool, "app.events")
	require.Equal(t, map[string][]string{"k2": {"kept"}}, marks)
}

// Upgrading outbox from 00003 to 00004 (the development history, sql/history/outbox) gives the
// queues registered before it what create_queue now gives: the TRUNCATE trigger, producers' INSERT
// on the event's columns only, NOT VALID checks and the recorded id sequence (also one a default
// uses without owning it); a registration whose table is already gone is kept and refused on use.
// Down to 00003 gives back 00003's grants and triggers.
func TestRegistration_UpgradeGuardsRegisteredQueues(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testdb.NewEmpty(t)
	sqlDB, err := sql.Open("pgx", db.URL)
	require.NoError(t, err)
	defer sqlDB.Close()
	provider := historyProvider(t, sqlDB, "outbox")
	_, err = provider.UpTo(ctx, 3)
	require.NoError(t, err)

	exec := func(q string) {
		t.Helper()
		_, err := db.Pool.Exec(ctx, q)
		require.NoError(t, err)
	}
	exec(`SELECT outbox.create_queue('public.events', 'resource_id')`)
	exec(`CREATE SEQUENCE public.shared_ids;
	      CREATE TABLE public.shared (id bigint PRIMARY KEY DEFAULT nextval('public.shared_ids'), event_type text NOT NULL,
	        payload jsonb NOT NULL, created_at timestamptz NOT NULL DEFAULT now(), k text NOT NULL, tenant text);
	      SELECT outbox.create_queue('public.shared', 'k')`)
	exec(`CREATE TABLE public.plain (id bigint PRIMARY KEY, event_type text NOT NULL, payload jsonb NOT NULL,
	        created_at timestamptz NOT NULL DEFAULT now());
	      SELECT outbox.create_queue('public.plain')`)
	exec(`SELECT outbox.create_queue('public.gone', 'resource_id'); DROP TABLE public.gone`)
	// A pending row with a JSON null payload, accepted by 00003: the upgrade must not wedge it.
	exec(`INSERT INTO public.events (event_type, payload, resource_id) VALUES ('e', 'null', 'r1'), ('e', '{}', 'r1')`)

	_, err = provider.UpTo(ctx, 4)
	require.NoError(t, err)

	for _, table := range []string{"public.events", "public.shared", "public.plain"} {
		var truncateTrigger, tableInsert, payloadInsert, leaseInsert bool
		require.NoError(t, db.Pool.QueryRow(ctx, `
			SELECT EXISTS (SELECT 1 FROM pg_trigger WHERE tgrelid = $1::regclass AND tgname = 'pgdrain_truncate'),
			       has_table_privilege('pgdrain_producer', $1, 'INSERT'),
			       has_column_privilege('pgdrain_producer', $1, 'payload', 'INSERT'),
			       has_column_privilege('pgdrain_producer', $1, 'leased_until', 'INSERT')`, table).
			Scan(&truncateTrigger, &tableInsert, &payloadInsert, &leaseInsert))
		require.True(t, truncateTrigger, "%s has the TRUNCATE trigger", table)
		require.False(t, tableInsert, "%s: producers lost the table-wide INSERT", table)
		require.True(t, payloadInsert, "%s: producers may insert the event's columns", table)
		require.False(t, leaseInsert, "%s: producers may not insert a lease", table)
	}
	var tenantInsert bool
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT has_column_privilege('pgdrain_producer', 'public.shared', 'tenant', 'INSERT')`).Scan(&tenantInsert))
	require.True(t, tenantInsert, "an adopted table's own columns are event columns")

	var sequences map[string]*string
	rows, err := db.Pool.Query(ctx, `SELECT queue, id_sequence::text FROM outbox.queues`)
	require.NoError(t, err)
	sequences = map[string]*string{}
	for rows.Next() {
		var q string
		var s *string
		require.NoError(t, rows.Scan(&q, &s))
		sequences[q] = s
	}
	require.NoError(t, rows.Err())
	require.NotNil(t, sequences["public.events"])
	require.Equal(t, "events_id_seq", *sequences["public.events"])
	require.NotNil(t, sequences["public.shared"])
	require.Equal(t, "shared_ids", *sequences["public.shared"], "a sequence the default uses without owning it is found")
	require.Nil(t, sequences["public.plain"])
	require.Contains(t, sequences, "public.gone", "the registration of a dropped table is kept")

	var checks []string
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT array_agg(conname::text || ':' || convalidated ORDER BY conname)
		FROM pg_constraint WHERE conrelid = 'public.events'::regclass AND conname LIKE 'pgdrain%'`).Scan(&checks))
	require.Equal(t, []string{"pgdrain_attempt_count_not_negative:false", "pgdrain_partition_key_not_empty:false"}, checks,
		"NOT VALID checks; the one a pending row breaks is left out")

	_, err = db.Pool.Exec(ctx, `SELECT * FROM outbox.claim_batch('public.gone')`)
	var pgErr *pgconn.PgError
	require.True(t, errors.As(err, &pgErr), "%v", err)
	require.Equal(t, "42P01", pgErr.Code)
	require.Contains(t, pgErr.Message, "the table of queue public.gone no longer exists")
	exec(`SELECT outbox.create_queue('public.gone', 'resource_id')`)

	marks, _ := drainQueue(t, db.Pool, "public.events")
	require.Len(t, marks["r1"], 2, "both pending rows, the JSON null one included, are delivered")

	_, err = provider.DownTo(ctx, 3)
	require.NoError(t, err)
	var triggers []string
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT array_agg(tgname::text ORDER BY tgname) FROM pg_trigger
		WHERE tgrelid = 'public.events'::regclass AND NOT tgisinternal`).Scan(&triggers))
	require.Equal(t, []string{"pgdrain_heads", "pgdrain_notify"}, triggers)
	var tableInsert bool
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT has_table_privilege('pgdrain_producer', 'public.events', 'INSERT')`).Scan(&tableInsert))
	require.True(t, tableInsert, "down gives 00003's table-wide INSERT back")
	var column bool
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_attribute
		WHERE attrelid = 'outbox.queues'::regclass AND attname = 'id_sequence' AND NOT attisdropped)`).Scan(&column))
	require.False(t, column)
	exec(`SELECT outbox.create_queue('public.events', 'resource_id')`)
}
