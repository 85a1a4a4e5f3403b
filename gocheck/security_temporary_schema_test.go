package gocheck

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
)

// plantTemporaryTypes gives conn's session temporary domains named like the types pgdrain's
// functions cast to (text, regclass, uuid, jsonb, timestamptz, oid, name, xid, tid; text[] follows
// text), each with a CHECK that fails the statement when it runs as anyone but the session's own
// user. PostgreSQL searches a session's temporary schema before pg_catalog for types and relations
// unless search_path lists pg_temp explicitly: with an empty search_path a SECURITY DEFINER function
// casting to text ran that CHECK as its owner (the schema owner, often a superuser), and a CHECK
// that ran ALTER ROLE ... SUPERUSER made the caller one.
func plantTemporaryTypes(t *testing.T, conn *pgx.Conn) {
	t.Helper()
	ctx := context.Background()
	_, err := conn.Exec(ctx, `
		CREATE FUNCTION pg_temp.hijack(v pg_catalog.text) RETURNS boolean LANGUAGE plpgsql AS $$
		BEGIN
		  IF current_user <> session_user THEN
		    RAISE EXCEPTION 'hijacked: a temporary type ran its check as %', current_user;
		  END IF;
		  RETURN true;
		END $$;
		CREATE DOMAIN pg_temp.text AS pg_catalog.text CHECK (pg_temp.hijack(VALUE));`)
	require.NoError(t, err)
	for _, typ := range []string{"regclass", "uuid", "jsonb", "timestamptz", "oid", "name", "xid", "tid"} {
		_, err := conn.Exec(ctx, `CREATE DOMAIN pg_temp.`+typ+` AS pg_catalog.`+typ+
			` CHECK (pg_temp.hijack(VALUE::pg_catalog.text))`)
		require.NoError(t, err, typ)
	}
	var shadowed bool
	require.NoError(t, conn.QueryRow(ctx, `SELECT t.typnamespace = pg_catalog.pg_my_temp_schema()
		FROM pg_catalog.pg_type t WHERE t.oid = pg_catalog.pg_typeof('x'::text)`).Scan(&shadowed))
	require.True(t, shadowed, "the session's own casts to text now find the temporary domain")
}

// Members of every pgdrain role, each with temporary types planted in its session, call what their
// role may: producers write (a plain INSERT fires the definer heads trigger and the commit step),
// workers drain in both modes and run the ladder, operators inspect and repair. None of it runs the
// planted checks with the functions' owner's privileges: every function pins search_path =
// pg_catalog, pg_temp (migrations outbox 00030, alr 00007). On the functions before, the
// producer's INSERT and the worker's first claim failed with "hijacked: ... ran its check as
// postgres".
func TestSecurity_TemporaryTypesNeverRunAsTheOwner(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := securityFixture(t)
	var policy string
	_, err := db.Pool.Exec(ctx, `
		SELECT outbox.create_queue('public.plain');
		SELECT outbox.enqueue('public.plain', 'created', '{}') FROM generate_series(1, 5);`)
	require.NoError(t, err)
	require.NoError(t, db.Pool.QueryRow(ctx, `
		SELECT alr.create_policy('on-call', '[{"delay": "0s", "channel": "telegram", "target": "@oncall"},
		                                      {"delay": "1 hour", "channel": "telegram", "target": "@lead"}]')::text`).Scan(&policy))

	producer := loginAs(t, db, "pgdrain_producer")
	worker := loginAs(t, db, "pgdrain_worker")
	operator := loginAs(t, db, "pgdrain_operator")
	for _, conn := range []*pgx.Conn{producer, worker, operator} {
		plantTemporaryTypes(t, conn)
	}

	runAs(t, producer, "producer", []roleCall{
		{"insert a new key", `INSERT INTO public.events (event_type, payload, resource_id) VALUES ('x', '{}', 'hijack-1')`, ""},
		{"insert existing keys in one statement", `INSERT INTO public.events (event_type, payload, resource_id) VALUES ('x', '{}', 'r1'), ('x', '{}', 'r2')`, ""},
		{"insert in two statements, immediate constraints", `BEGIN; SET CONSTRAINTS ALL IMMEDIATE;
			INSERT INTO public.events (event_type, payload, resource_id) VALUES ('x', '{}', 'r3');
			INSERT INTO public.events (event_type, payload, resource_id) VALUES ('x', '{}', 'hijack-2'); COMMIT`, ""},
		{"serializable insert", `BEGIN ISOLATION LEVEL SERIALIZABLE;
			INSERT INTO public.events (event_type, payload, resource_id) VALUES ('x', '{}', 'r4'); COMMIT`, ""},
		{"enqueue", `SELECT outbox.enqueue('public.events', 'created', '{"a": 1}', 'hijack-3', headers => '{"h": "v"}')`, ""},
		{"enqueue unpartitioned", `SELECT outbox.enqueue_event('public.plain', 'created', '{}')`, ""},
		{"insert unpartitioned", `INSERT INTO public.plain (event_type, payload) VALUES ('x', '{}')`, ""},
		{"start a ladder", `SELECT alr.start_escalation(alr.add_alert('db down'), '` + policy + `'::uuid)`, ""},
	})
	runAs(t, worker, "worker", []roleCall{
		{"claim, extend and apply a batch", `SELECT outbox.apply_results('public.events', array_agg(c.id), array_agg(c.lease_token),
			array_agg(CASE WHEN c.id % 2 = 0 THEN 'sent' ELSE 'transient' END), array_agg('boom'::pg_catalog.text))
			FROM outbox.claim_batch('public.events', 8) c WHERE outbox.extend_lease('public.events', c.id, c.lease_token, '1 minute') IS NOT NULL`, ""},
		{"claim runs and release", `SELECT outbox.release('public.events', c.id, c.lease_token) FROM outbox.claim_runs('public.events', 4, run_length => 3) c`, ""},
		{"lock mode", `BEGIN; SELECT outbox.settle_locked('public.events', (SELECT array_agg(c.id) FROM outbox.claim_locked('public.events', 2) c),
			ARRAY['sent', 'permanent']); COMMIT`, ""},
		{"lock mode, unpartitioned", `BEGIN; SELECT outbox.settle_locked('public.plain', (SELECT array_agg(c.id) FROM outbox.claim_locked('public.plain', 2) c),
			ARRAY['sent', 'sent']); COMMIT`, ""},
		{"lease mode, unpartitioned", `SELECT outbox.apply_result('public.plain', c.id, c.lease_token, 'sent') FROM outbox.claim_batch('public.plain', 2) c`, ""},
		{"wait and wake", `SELECT outbox.drainer_woke('public.events', outbox.drainer_waits('public.events', '1 second'))`, ""},
		{"stats", `SELECT * FROM outbox.stats('public.events')`, ""},
		{"the ladder's steps", `SELECT alr.apply_escalation(s.escalation_id, s.lease_token) FROM alr.take_due_steps(10) s`, ""},
	})
	runAs(t, operator, "operator", []roleCall{
		{"queue info", `SELECT * FROM outbox.queue_info('public.events')`, ""},
		{"wedged partitions", `SELECT * FROM outbox.wedged_partitions('public.events', '0 seconds')`, ""},
		{"check indexes", `SELECT * FROM outbox.check_indexes('public.events')`, ""},
		{"poisoned rows", `SELECT * FROM outbox.poisoned_rows('public.events')`, ""},
		{"requeue", `SELECT outbox.requeue_poisoned('public.events')`, ""},
		{"repair", `SELECT * FROM outbox.repair('public.events')`, ""},
		{"purge", `SELECT outbox.purge_sent('public.events', '0 seconds')`, ""},
		{"operator log", `SELECT * FROM outbox.operator_log('public.events')`, ""},
		{"a new policy", `SELECT alr.create_policy('night', '[{"delay": "0s", "channel": "telegram", "target": "@night"}]')`, ""},
	})

	var supers int
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT count(*) FROM pg_roles WHERE rolname LIKE 'pgdrain\_t\_%' AND rolsuper`).Scan(&supers))
	require.Zero(t, supers)
}
