-- +goose Up
-- Generated from sql/schema/outbox/00002_up.sql and sql/privileges/outbox.sql (and _down.sql).
-- +goose StatementBegin
-- The three roles of the outbox (cluster-wide, NOLOGIN: grant them to your login roles).
-- Created only when missing, so a second database on the same cluster (or a DBA who created them
-- beforehand, when the migrating role lacks CREATEROLE) is fine; two databases migrating at once
-- race on pg_authid's unique index, and the loser simply finds the role there.
DO $roles$
DECLARE
  v_role text;
BEGIN
  FOREACH v_role IN ARRAY ARRAY['pgdrain_worker', 'pgdrain_producer', 'pgdrain_operator'] LOOP
    IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_roles r WHERE r.rolname = v_role) THEN
      BEGIN
        EXECUTE pg_catalog.format('CREATE ROLE %I NOLOGIN', v_role);
      EXCEPTION WHEN duplicate_object OR unique_violation THEN
        NULL;
      END;
    END IF;
  END LOOP;
END
$roles$;
-- +goose StatementEnd

-- +goose StatementBegin
-- Who may call what in schema outbox (canonical source; migration 00002 carries the same
-- statements, and the drift check runs this file after sql/functions because CREATE OR REPLACE
-- FUNCTION resets SECURITY DEFINER to INVOKER). Idempotent. The reasons are in docs/security.md.
--
-- Nothing is executable by PUBLIC, also functions added later by the migrating role.
REVOKE ALL ON ALL FUNCTIONS IN SCHEMA outbox FROM PUBLIC;
ALTER DEFAULT PRIVILEGES IN SCHEMA outbox REVOKE EXECUTE ON FUNCTIONS FROM PUBLIC;
GRANT USAGE ON SCHEMA outbox TO pgdrain_worker, pgdrain_producer, pgdrain_operator;

-- SECURITY DEFINER: the callers get exactly what the function does to registered queues and no
-- privilege on any table, so a worker can not bypass the fencing token with a plain UPDATE and
-- outbox.partition_heads stays private. Each of these validates its arguments, pins search_path
-- and builds SQL only with format('%I') / regclass.
ALTER FUNCTION outbox.enqueue(text, text, jsonb, text) SECURITY DEFINER;
ALTER FUNCTION outbox.tg_queue__heads() SECURITY DEFINER;
ALTER FUNCTION outbox.claim_batch(text, integer, interval) SECURITY DEFINER;
ALTER FUNCTION outbox.apply_result(text, bigint, uuid, text, text) SECURITY DEFINER;
ALTER FUNCTION outbox.apply_results(text, bigint[], uuid[], text[], text[]) SECURITY DEFINER;
ALTER FUNCTION outbox.extend_lease(text, bigint, uuid, interval) SECURITY DEFINER;
ALTER FUNCTION outbox.release(text, bigint, uuid) SECURITY DEFINER;
ALTER FUNCTION outbox.claim_locked(text, integer) SECURITY DEFINER;
ALTER FUNCTION outbox.settle_locked(text, bigint[], text[], text[]) SECURITY DEFINER;
ALTER FUNCTION outbox.stats(text) SECURITY DEFINER;
ALTER FUNCTION outbox.wedged_partitions(text, interval, integer) SECURITY DEFINER;
ALTER FUNCTION outbox.check_indexes(text) SECURITY DEFINER;
ALTER FUNCTION outbox.requeue_poisoned(text, bigint[]) SECURITY DEFINER;
ALTER FUNCTION outbox.purge_sent(text, interval, integer) SECURITY DEFINER;

-- Producers: enqueue. A plain INSERT needs INSERT on the queue table, granted per table
-- (GRANT INSERT ON public.events TO pgdrain_producer); the heads trigger runs as definer.
GRANT EXECUTE ON FUNCTION outbox.enqueue(text, text, jsonb, text) TO pgdrain_producer;

-- Workers: both claim modes, results, heartbeats, releases.
GRANT EXECUTE ON FUNCTION
  outbox.claim_batch(text, integer, interval),
  outbox.apply_result(text, bigint, uuid, text, text),
  outbox.apply_results(text, bigint[], uuid[], text[], text[]),
  outbox.extend_lease(text, bigint, uuid, interval),
  outbox.release(text, bigint, uuid),
  outbox.claim_locked(text, integer),
  outbox.settle_locked(text, bigint[], text[], text[])
  TO pgdrain_worker;

-- Operators: read the state, give poisoned rows a fresh start, purge; list the registered queues.
GRANT EXECUTE ON FUNCTION
  outbox.stats(text),
  outbox.wedged_partitions(text, interval, integer),
  outbox.check_indexes(text),
  outbox.requeue_poisoned(text, bigint[]),
  outbox.purge_sent(text, interval, integer)
  TO pgdrain_operator;
GRANT SELECT ON outbox.queues TO pgdrain_operator;

-- create_queue and drop_queue stay SECURITY INVOKER and are granted to nobody: they create and
-- alter tables and triggers, which only the owner of the schema (the migrating role) should do.
-- +goose StatementEnd

-- +goose Down
-- +goose StatementBegin
-- Gives every outbox function back to PUBLIC as security invoker, as before 00002. The roles stay:
-- they are cluster-wide and other databases may still use them.
ALTER FUNCTION outbox.enqueue(text, text, jsonb, text) SECURITY INVOKER;
ALTER FUNCTION outbox.tg_queue__heads() SECURITY INVOKER;
ALTER FUNCTION outbox.claim_batch(text, integer, interval) SECURITY INVOKER;
ALTER FUNCTION outbox.apply_result(text, bigint, uuid, text, text) SECURITY INVOKER;
ALTER FUNCTION outbox.apply_results(text, bigint[], uuid[], text[], text[]) SECURITY INVOKER;
ALTER FUNCTION outbox.extend_lease(text, bigint, uuid, interval) SECURITY INVOKER;
ALTER FUNCTION outbox.release(text, bigint, uuid) SECURITY INVOKER;
ALTER FUNCTION outbox.claim_locked(text, integer) SECURITY INVOKER;
ALTER FUNCTION outbox.settle_locked(text, bigint[], text[], text[]) SECURITY INVOKER;
ALTER FUNCTION outbox.stats(text) SECURITY INVOKER;
ALTER FUNCTION outbox.wedged_partitions(text, interval, integer) SECURITY INVOKER;
ALTER FUNCTION outbox.check_indexes(text) SECURITY INVOKER;
ALTER FUNCTION outbox.requeue_poisoned(text, bigint[]) SECURITY INVOKER;
ALTER FUNCTION outbox.purge_sent(text, interval, integer) SECURITY INVOKER;
REVOKE ALL ON ALL FUNCTIONS IN SCHEMA outbox FROM pgdrain_worker, pgdrain_producer, pgdrain_operator;
REVOKE ALL ON outbox.queues FROM pgdrain_operator;
REVOKE ALL ON SCHEMA outbox FROM pgdrain_worker, pgdrain_producer, pgdrain_operator;
GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA outbox TO PUBLIC;
ALTER DEFAULT PRIVILEGES IN SCHEMA outbox GRANT EXECUTE ON FUNCTIONS TO PUBLIC;
-- +goose StatementEnd
