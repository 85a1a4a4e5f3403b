package gocheck

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pgdrain/pgdrain/internal/testdb"
)

// A hostile schema first in the caller's search_path shadows now(), gen_random_uuid(), lower()
// and the queue table's name. Every outbox function pins search_path = ” and qualifies what it
// calls, so the calls below land in public.events with real time and real tokens, and the
// hostile objects are never touched.
func TestSecurity_HostileSearchPathChangesNothing(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testdb.New(t)
	_, err := db.Pool.Exec(ctx, `
		CREATE SCHEMA hostile;
		CREATE TABLE hostile.calls (what text);
		CREATE FUNCTION hostile.now() RETURNS timestamptz LANGUAGE sql
		  AS $$ INSERT INTO hostile.calls VALUES ('now') RETURNING timestamptz '2099-01-01' $$;
		CREATE FUNCTION hostile.gen_random_uuid() RETURNS uuid LANGUAGE sql
		  AS $$ INSERT INTO hostile.calls VALUES ('gen_random_uuid') RETURNING '00000000-0000-0000-0000-000000000000'::uuid $$;
		CREATE FUNCTION hostile.lower(text) RETURNS text LANGUAGE sql
		  AS $$ INSERT INTO hostile.calls VALUES ('lower') RETURNING 'hijacked' $$;
		CREATE TABLE hostile.events (id bigint PRIMARY KEY, event_type text NOT NULL, payload jsonb NOT NULL,
		                             created_at timestamptz NOT NULL DEFAULT '2099-01-01', resource_id text);
		CREATE TABLE hostile.queues (queue text);`)
	require.NoError(t, err)

	conn, err := db.Pool.Acquire(ctx)
	require.NoError(t, err)
	defer conn.Release()
	_, err = conn.Exec(ctx, `SET search_path = hostile, pg_catalog, public`)
	require.NoError(t, err)
	var shadowedNow time.Time
	var shadowedLower string
	require.NoError(t, conn.QueryRow(ctx, `SELECT now(), lower('X')`).Scan(&shadowedNow, &shadowedLower))
	require.Equal(t, 2099, shadowedNow.Year(), "the shadowing is in effect for the caller")
	require.Equal(t, "hijacked", shadowedLower)
	_, err = conn.Exec(ctx, `TRUNCATE hostile.calls`)
	require.NoError(t, err)

	_, err = conn.Exec(ctx, `SELECT outbox.create_queue('Events', 'resource_id')`)
	require.NoError(t, err)
	_, err = conn.Exec(ctx, `SELECT outbox.enqueue('events', 'created', '{}', 'k' || g) FROM generate_series(1, 3) g`)
	require.NoError(t, err)
	_, err = conn.Exec(ctx, `INSERT INTO public.events (event_type, payload, resource_id) VALUES ('plain', '{}', 'k1')`)
	require.NoError(t, err)

	rows, err := conn.Query(ctx, `SELECT id, lease_token, leased_until FROM outbox.claim_batch('events', 10, '30 seconds')`)
	require.NoError(t, err)
	type claimed struct {
		ID     int64
		Token  [16]byte
		Leased time.Time
	}
	var got []claimed
	for rows.Next() {
		var c claimed
		require.NoError(t, rows.Scan(&c.ID, &c.Token, &c.Leased))
		got = append(got, c)
	}
	require.NoError(t, rows.Err())
	require.Len(t, got, 3, "one head per key k1..k3")
	for _, c := range got {
		require.NotEqual(t, [16]byte{}, c.Token, "token from pg_catalog.gen_random_uuid")
		require.WithinDuration(t, time.Now(), c.Leased, 5*time.Minute, "lease from pg_catalog.now")
		var applied bool
		require.NoError(t, conn.QueryRow(ctx, `SELECT outbox.apply_result('events', $1, $2, 'sent')`, c.ID, c.Token).Scan(&applied))
		require.True(t, applied)
	}
	_, err = conn.Exec(ctx, `BEGIN;
		SELECT outbox.settle_locked('events', (SELECT array_agg(id) FROM outbox.claim_locked('events', 10)), '{sent}');
		COMMIT;`)
	require.NoError(t, err)
	var pending, sent int64
	require.NoError(t, conn.QueryRow(ctx, `SELECT pending FROM outbox.stats('events')`).Scan(&pending))
	require.EqualValues(t, 0, pending)
	require.NoError(t, conn.QueryRow(ctx, `SELECT count(*) FROM public.events WHERE sent_at < '2098-01-01'`).Scan(&sent))
	require.EqualValues(t, 4, sent)
	_, err = conn.Exec(ctx, `SELECT outbox.purge_sent('events', '0 seconds'); SELECT outbox.drop_queue('events')`)
	require.NoError(t, err)

	var calls, hostileRows int64
	var registered string
	require.NoError(t, db.Pool.QueryRow(ctx, `
		SELECT (SELECT count(*) FROM hostile.calls), (SELECT count(*) FROM hostile.events),
		       (SELECT 'public.events'::regclass::text)`).Scan(&calls, &hostileRows, &registered))
	require.Zero(t, calls, "no outbox function called a hostile function")
	require.Zero(t, hostileRows, "nothing was written to hostile.events")
	require.Equal(t, "events", registered, "create_queue created public.events, not hostile.events")
}
