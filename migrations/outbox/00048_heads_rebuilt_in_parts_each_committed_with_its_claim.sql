-- +goose Up
-- +goose StatementBegin
-- Where a rebuild of a queue's partition heads stopped (outbox._restore_heads rebuilds in parts,
-- each committed with its claim). UNLOGGED with the heads: a crash empties both, and the rebuild
-- starts over.
CREATE UNLOGGED TABLE outbox.partition_heads_restored (
  queue_id integer CONSTRAINT partition_heads_restored_pkey PRIMARY KEY,
  after_key text NOT NULL
);
COMMENT ON TABLE outbox.partition_heads_restored IS
  'Partitioned queues whose partition_heads are being rebuilt: the last key done so far (internal; emptied by crash recovery).';
-- +goose StatementEnd

-- +goose StatementBegin
-- Brings back the partition heads of a queue after crash recovery (or a standby's promotion)
-- emptied the unlogged heads tables, or recomputes them (_rebuild_heads): every partition with
-- pending rows gets its head again, searched from floor 0.
-- One part per call: keys in their order, from where the last part stopped (unlogged, as the heads:
-- a crash starts over), 500 at a time until 50 ms have passed; the part that
-- finds no key left marks the heads built. Each part commits with the claim that made it, so a deep
-- backlog is rebuilt by many short claims: in one statement, 4.3 million pending rows over 2.1
-- million keys took 26 s, longer than a drainer's ClaimTimeout, and a claim cut off rolled it all
-- back, every time (invariant 9). Meanwhile claims take what the heads there are offer: each is
-- checked against the FIFO rule from its floor, so a partial set is only incomplete, and producers
-- give new keys floor 0 until the heads are built (outbox._make_heads).
-- Heads producers made since then are kept (upsert). One part at a time per queue: a claim tries
-- the queue's rebuild lock (outbox._claim; concurrent claims do not wait for it), other callers
-- (_rebuild_heads) wait. A part NOTIFYs the queue's channel: drainers whose claims found the heads
-- incomplete meanwhile claim again at its commit, and so make the next part.
CREATE OR REPLACE FUNCTION outbox._restore_heads(p_q outbox.queues)
RETURNS void
LANGUAGE plpgsql
VOLATILE
SET search_path = pg_catalog, pg_temp
SET enable_seqscan = off
SET enable_bitmapscan = off
SET enable_sort = off
SET jit = off
AS $$
DECLARE
  v_started constant timestamptz := pg_catalog.clock_timestamp();
  v_after text;
  v_keys text[];
  v_any boolean := false;
BEGIN
  PERFORM pg_catalog.pg_advisory_xact_lock(1885823232 + p_q.queue_id, -1);
  IF EXISTS (SELECT 1 FROM outbox.partition_heads_built b WHERE b.queue_id = p_q.queue_id) THEN
    RETURN;
  END IF;
  SELECT r.after_key INTO v_after FROM outbox.partition_heads_restored r WHERE r.queue_id = p_q.queue_id;
  LOOP
    -- The next keys with unsent rows (poisoned-only keys too: their refresh finds no head), one
    -- index probe each, in the column's own type and order.
    EXECUTE pg_catalog.format(
      'WITH RECURSIVE keys(k) AS (
         (SELECT t.%2$I FROM %1$s t WHERE t.sent_at IS NULL %4$s ORDER BY t.%2$I LIMIT 1)
         UNION ALL
         SELECT (SELECT t.%2$I FROM %1$s t WHERE t.sent_at IS NULL AND t.%2$I > keys.k ORDER BY t.%2$I LIMIT 1)
         FROM keys WHERE keys.k IS NOT NULL)
       SELECT pg_catalog.array_agg(s.k::text) FROM (SELECT keys.k FROM keys WHERE keys.k IS NOT NULL LIMIT 500) s',
      p_q.table_oid::regclass, p_q.partition_column, p_q.partition_type,
      CASE WHEN v_after IS NOT NULL THEN pg_catalog.format('AND t.%I > $1::%s', p_q.partition_column, p_q.partition_type) END)
      INTO v_keys USING v_after;
    IF v_keys IS NULL THEN
      DELETE FROM outbox.partition_heads_restored r WHERE r.queue_id = p_q.queue_id;
      INSERT INTO outbox.partition_heads_built (queue_id) VALUES (p_q.queue_id) ON CONFLICT DO NOTHING;
      EXIT;
    END IF;
    v_any := true;
    UPDATE outbox.partition_heads h SET floor_id = 0
    WHERE h.queue_id = p_q.queue_id AND h.partition_key = ANY (v_keys) AND h.floor_id <> 0;
    PERFORM outbox._refresh_heads(p_q, v_keys);
    v_after := v_keys[pg_catalog.array_length(v_keys, 1)];
    IF pg_catalog.clock_timestamp() - v_started > interval '50 milliseconds' THEN
      INSERT INTO outbox.partition_heads_restored AS r (queue_id, after_key) VALUES (p_q.queue_id, v_after)
      ON CONFLICT (queue_id) DO UPDATE SET after_key = excluded.after_key;
      EXIT;
    END IF;
  END LOOP;
  IF v_any AND pg_catalog.current_setting('pgdrain.notify', true) IS DISTINCT FROM 'off' THEN
    PERFORM pg_catalog.pg_notify(p_q.channel, p_q.queue);
  END IF;
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- Recomputes the partition heads of a queue from its pending rows (after adoption, after a change of
-- max_attempts made poisoned rows deliverable again, or after an operator changed rows by hand):
-- floors go back to 0 and every partition with a deliverable row gets its head pointed at it, the
-- same way heads come back after a crash (_restore_heads), here all parts in this transaction. Heads
-- are never deleted here: a producer in flight may own the only rows of a key, and its commit step
-- relies on the head it saw; heads left without rows are dropped by the next claim that looks at
-- them (under the producer lock).
CREATE OR REPLACE FUNCTION outbox._rebuild_heads(p_queue_id integer)
RETURNS void
LANGUAGE plpgsql
VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  v_q outbox.queues;
BEGIN
  SELECT * INTO STRICT v_q FROM outbox.queues q WHERE q.queue_id = p_queue_id;
  PERFORM pg_catalog.pg_advisory_xact_lock(1885823232 + p_queue_id, -1);
  DELETE FROM outbox.partition_heads_built b WHERE b.queue_id = p_queue_id;
  DELETE FROM outbox.partition_heads_restored r WHERE r.queue_id = p_queue_id;
  UPDATE outbox.partition_heads h SET floor_id = 0 WHERE h.queue_id = p_queue_id AND h.floor_id <> 0;
  WHILE NOT EXISTS (SELECT 1 FROM outbox.partition_heads_built b WHERE b.queue_id = p_queue_id) LOOP
    PERFORM outbox._restore_heads(v_q);
  END LOOP;
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- Unregisters a queue: removes its triggers (and its heads trigger function), partition heads, built-mark,
-- clocks, claim hints, statements with kept plans and registry row;
-- with drop_table = true also drops the table. The indexes, CHECKs and grants stay with the table.
-- Works when the table is already gone (dropped outside drop_queue): then only the registration
-- and its derived state go.
CREATE OR REPLACE FUNCTION outbox.drop_queue(queue text, drop_table boolean DEFAULT false)
RETURNS void
LANGUAGE plpgsql
VOLATILE
SET search_path = pg_catalog, pg_temp
SET client_min_messages = warning
AS $$
DECLARE
  fn constant text := 'drop_queue';
  v_name text := outbox._queue_name(fn, queue);
  v_q outbox.queues;
  v_rel regclass;
BEGIN
  -- Not outbox._queue: that refuses a registration whose table is gone, which is what this clears.
  SELECT * INTO v_q FROM outbox.queues q WHERE q.queue = v_name FOR UPDATE;
  IF NOT FOUND THEN
    RAISE EXCEPTION '%: queue % is not registered (call outbox.create_queue first)', fn, v_name
      USING ERRCODE = '42P01';
  END IF;
  IF drop_table IS NULL THEN
    PERFORM outbox._invalid(fn, 'drop_table must not be NULL');
  END IF;
  IF pg_catalog.pg_table_is_visible(v_q.table_oid) IS NOT NULL THEN
    v_rel := v_q.table_oid::regclass;
  END IF;
  DELETE FROM outbox.partition_heads h WHERE h.queue_id = v_q.queue_id;
  DELETE FROM outbox.partition_heads_built b WHERE b.queue_id = v_q.queue_id;
  DELETE FROM outbox.partition_heads_restored r WHERE r.queue_id = v_q.queue_id;
  DELETE FROM outbox.partition_clocks c WHERE c.queue_id = v_q.queue_id;
  DELETE FROM outbox.partition_wakes w WHERE w.queue_id = v_q.queue_id;
  DELETE FROM outbox.queues q WHERE q.queue_id = v_q.queue_id;
  IF v_rel IS NULL THEN
    NULL;
  ELSIF drop_table THEN
    EXECUTE pg_catalog.format('DROP TABLE %s', v_rel);
  ELSE
    EXECUTE pg_catalog.format('DROP TRIGGER IF EXISTS pgdrain_notify ON %s', v_rel);
    EXECUTE pg_catalog.format('DROP TRIGGER IF EXISTS pgdrain_heads ON %s', v_rel);
    EXECUTE pg_catalog.format('DROP TRIGGER IF EXISTS pgdrain_snapshot ON %s', v_rel);
    EXECUTE pg_catalog.format('DROP TRIGGER IF EXISTS pgdrain_truncate ON %s', v_rel);
    EXECUTE pg_catalog.format('DROP TRIGGER IF EXISTS pgdrain_key_fixed ON %s', v_rel);
  END IF;
  -- The queue's own heads trigger function (outbox._install_heads_trigger).
  EXECUTE pg_catalog.format('DROP FUNCTION IF EXISTS outbox.%I()', 'tg_queue__heads_q' || v_q.queue_id);
  -- Its claim hints (outbox._install_claim_hints).
  EXECUTE pg_catalog.format('DROP SEQUENCE IF EXISTS outbox.%I', 'claim_start_q' || v_q.queue_id);
  EXECUTE pg_catalog.format('DROP SEQUENCE IF EXISTS outbox.%I', 'claim_front_q' || v_q.queue_id);
  -- Its drainers' waiting mark (outbox._install_notify_trigger).
  EXECUTE pg_catalog.format('DROP SEQUENCE IF EXISTS outbox.%I', 'drainer_waits_q' || v_q.queue_id);
  -- Its drainers' claim turn (outbox.claim_turn).
  EXECUTE pg_catalog.format('DROP SEQUENCE IF EXISTS outbox.%I', 'claim_turn_q' || v_q.queue_id);
  -- Its kept statements (outbox._prepared) and late-rows function (outbox._late_rows_function).
  PERFORM outbox._drop_functions('^_q' || v_q.queue_id || '_');
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- The version of the outbox schema installed in this database: the release it belongs to and the
-- number of the last migration applied (the file migrations/outbox/NNNNN_*.sql). A client that needs
-- a function added by migration N checks migration >= N before it starts (the Go drainer does).
-- Every migration carries this function with its own number (a test compares the two), and its
-- Down restores the body before it, so the answer is right after goose up or down to any migration.
CREATE OR REPLACE FUNCTION outbox.version(OUT version text, OUT migration integer)
LANGUAGE sql
STABLE
PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
  SELECT '0.1.0'::text, 48;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- Who may call what in schema outbox (canonical source; migrations 00002 and 00003 carry the same
-- statements, and the drift check runs this file after sql/functions because CREATE OR REPLACE
-- FUNCTION resets SECURITY DEFINER to INVOKER). Idempotent. The reasons are in docs/security.md.
--
-- Nothing is executable by PUBLIC, also functions added later by the migrating role.
REVOKE ALL ON ALL FUNCTIONS IN SCHEMA outbox FROM PUBLIC;
ALTER DEFAULT PRIVILEGES IN SCHEMA outbox REVOKE EXECUTE ON FUNCTIONS FROM PUBLIC;
GRANT USAGE ON SCHEMA outbox TO pgdrain_worker, pgdrain_producer, pgdrain_operator, pgdrain_reader;

-- SECURITY DEFINER: the callers get exactly what the function does to registered queues and no
-- privilege on any table, so a worker can not bypass the fencing token with a plain UPDATE and
-- outbox.partition_heads stays private. Each of these validates its arguments, pins search_path
-- and builds SQL only with format('%I') / regclass.
ALTER FUNCTION outbox.enqueue(text, text, jsonb, text, timestamptz, jsonb, uuid) SECURITY DEFINER;
ALTER FUNCTION outbox.enqueue_event(text, text, jsonb, text, timestamptz, jsonb, uuid) SECURITY DEFINER;
ALTER FUNCTION outbox.tg_queue__commit() SECURITY DEFINER;
ALTER FUNCTION outbox.tg_queue__truncate() SECURITY DEFINER;
ALTER FUNCTION outbox.tg_queue__notify() SECURITY DEFINER;
ALTER FUNCTION outbox.claim_batch(text, integer, interval) SECURITY DEFINER;
ALTER FUNCTION outbox.claim_runs(text, integer, interval, integer) SECURITY DEFINER;
ALTER FUNCTION outbox.apply_result(text, bigint, uuid, text, text, timestamptz) SECURITY DEFINER;
ALTER FUNCTION outbox.apply_results(text, bigint[], uuid[], text[], text[], timestamptz[]) SECURITY DEFINER;
ALTER FUNCTION outbox.extend_lease(text, bigint, uuid, interval) SECURITY DEFINER;
ALTER FUNCTION outbox.release(text, bigint, uuid) SECURITY DEFINER;
ALTER FUNCTION outbox.claim_locked(text, integer) SECURITY DEFINER;
ALTER FUNCTION outbox.claim_locked_runs(text, integer, integer) SECURITY DEFINER;
ALTER FUNCTION outbox.settle_locked(text, bigint[], text[], text[], timestamptz[]) SECURITY DEFINER;
ALTER FUNCTION outbox.stats(text) SECURITY DEFINER;
ALTER FUNCTION outbox.wedged_partitions(text, interval, integer) SECURITY DEFINER;
ALTER FUNCTION outbox.check_indexes(text) SECURITY DEFINER;
ALTER FUNCTION outbox.requeue_poisoned(text, bigint[]) SECURITY DEFINER;
ALTER FUNCTION outbox.purge_sent(text, interval, integer) SECURITY DEFINER;
ALTER FUNCTION outbox.queue_info(text) SECURITY DEFINER;
ALTER FUNCTION outbox.poisoned_rows(text, integer, bigint) SECURITY DEFINER;
ALTER FUNCTION outbox.release_lease(text, bigint, timestamptz) SECURITY DEFINER;
ALTER FUNCTION outbox.next_due(text) SECURITY DEFINER;
ALTER FUNCTION outbox.repair(text, boolean) SECURITY DEFINER;
ALTER FUNCTION outbox.drainer_waits(text, interval) SECURITY DEFINER;
ALTER FUNCTION outbox.drainer_woke(text, bigint) SECURITY DEFINER;
ALTER FUNCTION outbox.claim_turn(text, interval) SECURITY DEFINER;
ALTER FUNCTION outbox.poison_row(text, bigint, integer, text) SECURITY DEFINER;
ALTER FUNCTION outbox.retry_row(text, bigint, integer, text) SECURITY DEFINER;
ALTER FUNCTION outbox.dismiss_poisoned(text, bigint[], text) SECURITY DEFINER;
ALTER FUNCTION outbox.operator_log(text, integer, bigint) SECURITY DEFINER;

-- Producers: enqueue. A plain INSERT needs INSERT on the event's columns of the queue table, which
-- create_queue grants per table (outbox._guard_queue_table); the heads, commit and truncate triggers
-- run as definer and are executable by nobody.
GRANT EXECUTE ON FUNCTION outbox.enqueue(text, text, jsonb, text, timestamptz, jsonb, uuid) TO pgdrain_producer;
GRANT EXECUTE ON FUNCTION outbox.enqueue_event(text, text, jsonb, text, timestamptz, jsonb, uuid) TO pgdrain_producer;

-- Workers: both claim modes, results, heartbeats, releases.
GRANT EXECUTE ON FUNCTION
  outbox.claim_batch(text, integer, interval),
  outbox.claim_runs(text, integer, interval, integer),
  outbox.apply_result(text, bigint, uuid, text, text, timestamptz),
  outbox.apply_results(text, bigint[], uuid[], text[], text[], timestamptz[]),
  outbox.extend_lease(text, bigint, uuid, interval),
  outbox.release(text, bigint, uuid),
  outbox.claim_locked(text, integer),
  outbox.claim_locked_runs(text, integer, integer),
  outbox.settle_locked(text, bigint[], text[], text[], timestamptz[])
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

-- Workers and operators: a queue's settings, when its next row is due (the drainer's sleep), and the
-- repair pass over its partition heads (the drainer runs it periodically; pgdrain check dry-runs it).
GRANT EXECUTE ON FUNCTION
  outbox.queue_info(text),
  outbox.next_due(text),
  outbox.repair(text, boolean)
  TO pgdrain_worker, pgdrain_operator;

-- Workers say when they wait for a NOTIFY of a queue that notifies 'when_waiting' (outbox.set_notify,
-- which like create_queue is granted to nobody), and take turns to claim while rows trickle in.
GRANT EXECUTE ON FUNCTION
  outbox.drainer_waits(text, interval),
  outbox.drainer_woke(text, bigint),
  outbox.claim_turn(text, interval)
  TO pgdrain_worker;

-- Workers also read what the Go drainer reports about its queue: the gauges (WithMetrics), wedged
-- partitions (WithWedgeObserver) and the index check at start. All read-only, no payloads.
GRANT EXECUTE ON FUNCTION
  outbox.stats(text),
  outbox.wedged_partitions(text, interval, integer),
  outbox.check_indexes(text)
  TO pgdrain_worker;

-- create_queue and drop_queue stay SECURITY INVOKER and are granted to nobody: they create and
-- alter tables and triggers, which only the owner of the schema (the migrating role) should do.

-- Readers (the operator console's pages, dashboards): the gauges, wedged partitions, the index
-- check, the registered queues and the poisoned rows, never a payload unless granted on the table.
-- Operators read the same, and may end a stuck lease.
GRANT EXECUTE ON FUNCTION
  outbox.stats(text),
  outbox.wedged_partitions(text, interval, integer),
  outbox.check_indexes(text),
  outbox.queue_info(text),
  outbox.next_due(text),
  outbox.poisoned_rows(text, integer, bigint)
  TO pgdrain_reader;
GRANT SELECT ON outbox.queues TO pgdrain_reader;
GRANT EXECUTE ON FUNCTION
  outbox.poisoned_rows(text, integer, bigint),
  outbox.release_lease(text, bigint, timestamptz)
  TO pgdrain_operator;

-- Operators act on rows that will not move on their own (00025): skip (poison with a reason), retry
-- now, dismiss poisoned rows; every action is fenced and logged, and the log is read by operators
-- and readers.
GRANT EXECUTE ON FUNCTION
  outbox.poison_row(text, bigint, integer, text),
  outbox.retry_row(text, bigint, integer, text),
  outbox.dismiss_poisoned(text, bigint[], text),
  outbox.operator_log(text, integer, bigint)
  TO pgdrain_operator;
GRANT EXECUTE ON FUNCTION outbox.operator_log(text, integer, bigint) TO pgdrain_reader;

-- Everyone who may use the schema reads its version (outbox.version: a constant, no data): the Go
-- drainer checks it at start, pgdrain --version prints it.
GRANT EXECUTE ON FUNCTION outbox.version() TO pgdrain_worker, pgdrain_producer, pgdrain_operator, pgdrain_reader;
-- +goose StatementEnd

-- +goose Down

-- +goose StatementBegin
-- Brings back the partition heads of a queue after crash recovery (or a standby's promotion)
-- emptied the unlogged heads tables, or recomputes them (_rebuild_heads): every partition with
-- pending rows gets its head again, searched from floor 0.
-- Heads producers made since then are kept (upsert). Runs once per queue: the first claim takes
-- the queue's rebuild lock, looks again, and rebuilds; concurrent claims do not wait for it
-- (outbox._claim tries the lock), other callers (_rebuild_heads) do. A rebuild NOTIFYs the queue's
-- channel: drainers whose claims found the heads incomplete meanwhile claim again at its commit.
CREATE OR REPLACE FUNCTION outbox._restore_heads(p_q outbox.queues)
RETURNS void
LANGUAGE plpgsql
VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  v_keys text[];
BEGIN
  PERFORM pg_catalog.pg_advisory_xact_lock(1885823232 + p_q.queue_id, -1);
  IF EXISTS (SELECT 1 FROM outbox.partition_heads_built b WHERE b.queue_id = p_q.queue_id) THEN
    RETURN;
  END IF;
  -- Keys with deliverable rows, and keys that have a head (a rebuild keeps heads: the search from
  -- floor 0 below repoints or, under the producer lock, drops them).
  EXECUTE pg_catalog.format(
    'SELECT pg_catalog.array_agg(k) FROM (
       SELECT %I::text AS k FROM %s WHERE sent_at IS NULL AND attempt_count < $1
       UNION
       SELECT h.partition_key FROM outbox.partition_heads h WHERE h.queue_id = $2) s',
    p_q.partition_column, p_q.table_oid::regclass)
    INTO v_keys USING p_q.max_attempts, p_q.queue_id;
  UPDATE outbox.partition_heads h SET floor_id = 0 WHERE h.queue_id = p_q.queue_id;
  PERFORM outbox._refresh_heads(p_q, v_keys);
  INSERT INTO outbox.partition_heads_built (queue_id) VALUES (p_q.queue_id) ON CONFLICT DO NOTHING;
  IF v_keys IS NOT NULL AND pg_catalog.current_setting('pgdrain.notify', true) IS DISTINCT FROM 'off' THEN
    PERFORM pg_catalog.pg_notify(p_q.channel, p_q.queue);
  END IF;
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- Recomputes the partition heads of a queue from its pending rows (after adoption, after a change of
-- max_attempts made poisoned rows deliverable again, or after an operator changed rows by hand):
-- floors go back to 0 and every partition with a deliverable row gets its head pointed at it, the
-- same way heads come back after a crash (_restore_heads). Heads are never deleted here: a producer
-- in flight may own the only rows of a key, and its commit step relies on the head it saw; heads
-- left without rows are dropped by the next claim that looks at them (under the producer lock).
CREATE OR REPLACE FUNCTION outbox._rebuild_heads(p_queue_id integer)
RETURNS void
LANGUAGE plpgsql
VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  v_q outbox.queues;
BEGIN
  SELECT * INTO STRICT v_q FROM outbox.queues q WHERE q.queue_id = p_queue_id;
  DELETE FROM outbox.partition_heads_built b WHERE b.queue_id = p_queue_id;
  PERFORM outbox._restore_heads(v_q);
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- Unregisters a queue: removes its triggers (and its heads trigger function), partition heads, built-mark,
-- clocks, claim hints, statements with kept plans and registry row;
-- with drop_table = true also drops the table. The indexes, CHECKs and grants stay with the table.
-- Works when the table is already gone (dropped outside drop_queue): then only the registration
-- and its derived state go.
CREATE OR REPLACE FUNCTION outbox.drop_queue(queue text, drop_table boolean DEFAULT false)
RETURNS void
LANGUAGE plpgsql
VOLATILE
SET search_path = pg_catalog, pg_temp
SET client_min_messages = warning
AS $$
DECLARE
  fn constant text := 'drop_queue';
  v_name text := outbox._queue_name(fn, queue);
  v_q outbox.queues;
  v_rel regclass;
BEGIN
  -- Not outbox._queue: that refuses a registration whose table is gone, which is what this clears.
  SELECT * INTO v_q FROM outbox.queues q WHERE q.queue = v_name FOR UPDATE;
  IF NOT FOUND THEN
    RAISE EXCEPTION '%: queue % is not registered (call outbox.create_queue first)', fn, v_name
      USING ERRCODE = '42P01';
  END IF;
  IF drop_table IS NULL THEN
    PERFORM outbox._invalid(fn, 'drop_table must not be NULL');
  END IF;
  IF pg_catalog.pg_table_is_visible(v_q.table_oid) IS NOT NULL THEN
    v_rel := v_q.table_oid::regclass;
  END IF;
  DELETE FROM outbox.partition_heads h WHERE h.queue_id = v_q.queue_id;
  DELETE FROM outbox.partition_heads_built b WHERE b.queue_id = v_q.queue_id;
  DELETE FROM outbox.partition_clocks c WHERE c.queue_id = v_q.queue_id;
  DELETE FROM outbox.partition_wakes w WHERE w.queue_id = v_q.queue_id;
  DELETE FROM outbox.queues q WHERE q.queue_id = v_q.queue_id;
  IF v_rel IS NULL THEN
    NULL;
  ELSIF drop_table THEN
    EXECUTE pg_catalog.format('DROP TABLE %s', v_rel);
  ELSE
    EXECUTE pg_catalog.format('DROP TRIGGER IF EXISTS pgdrain_notify ON %s', v_rel);
    EXECUTE pg_catalog.format('DROP TRIGGER IF EXISTS pgdrain_heads ON %s', v_rel);
    EXECUTE pg_catalog.format('DROP TRIGGER IF EXISTS pgdrain_snapshot ON %s', v_rel);
    EXECUTE pg_catalog.format('DROP TRIGGER IF EXISTS pgdrain_truncate ON %s', v_rel);
    EXECUTE pg_catalog.format('DROP TRIGGER IF EXISTS pgdrain_key_fixed ON %s', v_rel);
  END IF;
  -- The queue's own heads trigger function (outbox._install_heads_trigger).
  EXECUTE pg_catalog.format('DROP FUNCTION IF EXISTS outbox.%I()', 'tg_queue__heads_q' || v_q.queue_id);
  -- Its claim hints (outbox._install_claim_hints).
  EXECUTE pg_catalog.format('DROP SEQUENCE IF EXISTS outbox.%I', 'claim_start_q' || v_q.queue_id);
  EXECUTE pg_catalog.format('DROP SEQUENCE IF EXISTS outbox.%I', 'claim_front_q' || v_q.queue_id);
  -- Its drainers' waiting mark (outbox._install_notify_trigger).
  EXECUTE pg_catalog.format('DROP SEQUENCE IF EXISTS outbox.%I', 'drainer_waits_q' || v_q.queue_id);
  -- Its drainers' claim turn (outbox.claim_turn).
  EXECUTE pg_catalog.format('DROP SEQUENCE IF EXISTS outbox.%I', 'claim_turn_q' || v_q.queue_id);
  -- Its kept statements (outbox._prepared) and late-rows function (outbox._late_rows_function).
  PERFORM outbox._drop_functions('^_q' || v_q.queue_id || '_');
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- The version of the outbox schema installed in this database: the release it belongs to and the
-- number of the last migration applied (the file migrations/outbox/NNNNN_*.sql). A client that needs
-- a function added by migration N checks migration >= N before it starts (the Go drainer does).
-- Every migration carries this function with its own number (a test compares the two), and its
-- Down restores the body before it, so the answer is right after goose up or down to any migration.
CREATE OR REPLACE FUNCTION outbox.version(OUT version text, OUT migration integer)
LANGUAGE sql
STABLE
PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
  SELECT '0.1.0'::text, 47;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- Who may call what in schema outbox (canonical source; migrations 00002 and 00003 carry the same
-- statements, and the drift check runs this file after sql/functions because CREATE OR REPLACE
-- FUNCTION resets SECURITY DEFINER to INVOKER). Idempotent. The reasons are in docs/security.md.
--
-- Nothing is executable by PUBLIC, also functions added later by the migrating role.
REVOKE ALL ON ALL FUNCTIONS IN SCHEMA outbox FROM PUBLIC;
ALTER DEFAULT PRIVILEGES IN SCHEMA outbox REVOKE EXECUTE ON FUNCTIONS FROM PUBLIC;
GRANT USAGE ON SCHEMA outbox TO pgdrain_worker, pgdrain_producer, pgdrain_operator, pgdrain_reader;

-- SECURITY DEFINER: the callers get exactly what the function does to registered queues and no
-- privilege on any table, so a worker can not bypass the fencing token with a plain UPDATE and
-- outbox.partition_heads stays private. Each of these validates its arguments, pins search_path
-- and builds SQL only with format('%I') / regclass.
ALTER FUNCTION outbox.enqueue(text, text, jsonb, text, timestamptz, jsonb, uuid) SECURITY DEFINER;
ALTER FUNCTION outbox.enqueue_event(text, text, jsonb, text, timestamptz, jsonb, uuid) SECURITY DEFINER;
ALTER FUNCTION outbox.tg_queue__commit() SECURITY DEFINER;
ALTER FUNCTION outbox.tg_queue__truncate() SECURITY DEFINER;
ALTER FUNCTION outbox.tg_queue__notify() SECURITY DEFINER;
ALTER FUNCTION outbox.claim_batch(text, integer, interval) SECURITY DEFINER;
ALTER FUNCTION outbox.claim_runs(text, integer, interval, integer) SECURITY DEFINER;
ALTER FUNCTION outbox.apply_result(text, bigint, uuid, text, text, timestamptz) SECURITY DEFINER;
ALTER FUNCTION outbox.apply_results(text, bigint[], uuid[], text[], text[], timestamptz[]) SECURITY DEFINER;
ALTER FUNCTION outbox.extend_lease(text, bigint, uuid, interval) SECURITY DEFINER;
ALTER FUNCTION outbox.release(text, bigint, uuid) SECURITY DEFINER;
ALTER FUNCTION outbox.claim_locked(text, integer) SECURITY DEFINER;
ALTER FUNCTION outbox.claim_locked_runs(text, integer, integer) SECURITY DEFINER;
ALTER FUNCTION outbox.settle_locked(text, bigint[], text[], text[], timestamptz[]) SECURITY DEFINER;
ALTER FUNCTION outbox.stats(text) SECURITY DEFINER;
ALTER FUNCTION outbox.wedged_partitions(text, interval, integer) SECURITY DEFINER;
ALTER FUNCTION outbox.check_indexes(text) SECURITY DEFINER;
ALTER FUNCTION outbox.requeue_poisoned(text, bigint[]) SECURITY DEFINER;
ALTER FUNCTION outbox.purge_sent(text, interval, integer) SECURITY DEFINER;
ALTER FUNCTION outbox.queue_info(text) SECURITY DEFINER;
ALTER FUNCTION outbox.poisoned_rows(text, integer, bigint) SECURITY DEFINER;
ALTER FUNCTION outbox.release_lease(text, bigint, timestamptz) SECURITY DEFINER;
ALTER FUNCTION outbox.next_due(text) SECURITY DEFINER;
ALTER FUNCTION outbox.repair(text, boolean) SECURITY DEFINER;
ALTER FUNCTION outbox.drainer_waits(text, interval) SECURITY DEFINER;
ALTER FUNCTION outbox.drainer_woke(text, bigint) SECURITY DEFINER;
ALTER FUNCTION outbox.claim_turn(text, interval) SECURITY DEFINER;
ALTER FUNCTION outbox.poison_row(text, bigint, integer, text) SECURITY DEFINER;
ALTER FUNCTION outbox.retry_row(text, bigint, integer, text) SECURITY DEFINER;
ALTER FUNCTION outbox.dismiss_poisoned(text, bigint[], text) SECURITY DEFINER;
ALTER FUNCTION outbox.operator_log(text, integer, bigint) SECURITY DEFINER;

-- Producers: enqueue. A plain INSERT needs INSERT on the event's columns of the queue table, which
-- create_queue grants per table (outbox._guard_queue_table); the heads, commit and truncate triggers
-- run as definer and are executable by nobody.
GRANT EXECUTE ON FUNCTION outbox.enqueue(text, text, jsonb, text, timestamptz, jsonb, uuid) TO pgdrain_producer;
GRANT EXECUTE ON FUNCTION outbox.enqueue_event(text, text, jsonb, text, timestamptz, jsonb, uuid) TO pgdrain_producer;

-- Workers: both claim modes, results, heartbeats, releases.
GRANT EXECUTE ON FUNCTION
  outbox.claim_batch(text, integer, interval),
  outbox.claim_runs(text, integer, interval, integer),
  outbox.apply_result(text, bigint, uuid, text, text, timestamptz),
  outbox.apply_results(text, bigint[], uuid[], text[], text[], timestamptz[]),
  outbox.extend_lease(text, bigint, uuid, interval),
  outbox.release(text, bigint, uuid),
  outbox.claim_locked(text, integer),
  outbox.claim_locked_runs(text, integer, integer),
  outbox.settle_locked(text, bigint[], text[], text[], timestamptz[])
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

-- Workers and operators: a queue's settings, when its next row is due (the drainer's sleep), and the
-- repair pass over its partition heads (the drainer runs it periodically; pgdrain check dry-runs it).
GRANT EXECUTE ON FUNCTION
  outbox.queue_info(text),
  outbox.next_due(text),
  outbox.repair(text, boolean)
  TO pgdrain_worker, pgdrain_operator;

-- Workers say when they wait for a NOTIFY of a queue that notifies 'when_waiting' (outbox.set_notify,
-- which like create_queue is granted to nobody), and take turns to claim while rows trickle in.
GRANT EXECUTE ON FUNCTION
  outbox.drainer_waits(text, interval),
  outbox.drainer_woke(text, bigint),
  outbox.claim_turn(text, interval)
  TO pgdrain_worker;

-- Workers also read what the Go drainer reports about its queue: the gauges (WithMetrics), wedged
-- partitions (WithWedgeObserver) and the index check at start. All read-only, no payloads.
GRANT EXECUTE ON FUNCTION
  outbox.stats(text),
  outbox.wedged_partitions(text, interval, integer),
  outbox.check_indexes(text)
  TO pgdrain_worker;

-- create_queue and drop_queue stay SECURITY INVOKER and are granted to nobody: they create and
-- alter tables and triggers, which only the owner of the schema (the migrating role) should do.

-- Readers (the operator console's pages, dashboards): the gauges, wedged partitions, the index
-- check, the registered queues and the poisoned rows, never a payload unless granted on the table.
-- Operators read the same, and may end a stuck lease.
GRANT EXECUTE ON FUNCTION
  outbox.stats(text),
  outbox.wedged_partitions(text, interval, integer),
  outbox.check_indexes(text),
  outbox.queue_info(text),
  outbox.next_due(text),
  outbox.poisoned_rows(text, integer, bigint)
  TO pgdrain_reader;
GRANT SELECT ON outbox.queues TO pgdrain_reader;
GRANT EXECUTE ON FUNCTION
  outbox.poisoned_rows(text, integer, bigint),
  outbox.release_lease(text, bigint, timestamptz)
  TO pgdrain_operator;

-- Operators act on rows that will not move on their own (00025): skip (poison with a reason), retry
-- now, dismiss poisoned rows; every action is fenced and logged, and the log is read by operators
-- and readers.
GRANT EXECUTE ON FUNCTION
  outbox.poison_row(text, bigint, integer, text),
  outbox.retry_row(text, bigint, integer, text),
  outbox.dismiss_poisoned(text, bigint[], text),
  outbox.operator_log(text, integer, bigint)
  TO pgdrain_operator;
GRANT EXECUTE ON FUNCTION outbox.operator_log(text, integer, bigint) TO pgdrain_reader;

-- Everyone who may use the schema reads its version (outbox.version: a constant, no data): the Go
-- drainer checks it at start, pgdrain --version prints it.
GRANT EXECUTE ON FUNCTION outbox.version() TO pgdrain_worker, pgdrain_producer, pgdrain_operator, pgdrain_reader;
-- +goose StatementEnd

-- +goose StatementBegin
DROP TABLE outbox.partition_heads_restored;
-- +goose StatementEnd
