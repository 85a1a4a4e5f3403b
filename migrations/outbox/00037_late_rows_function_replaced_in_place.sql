-- +goose Up
-- +goose StatementBegin
-- The late-rows function takes a second argument (p_replace: made again in place by create_queue).
DROP FUNCTION outbox._late_rows_function(outbox.queues);
-- +goose StatementEnd

-- +goose StatementBegin
-- The function that runs outbox._late_rows' statement for a queue, made for the queue and its table
-- as registered and named now: outbox._q<queue_id>_late_<hash of the table and column>, static
-- SQL, so PL/pgSQL keeps its plan for the session. A renamed table or column finds no function of
-- its name and gets one. Made by create_queue (so that producers' commits do not make it) and
-- otherwise by the first commit that needs it, as outbox._prepared makes its functions (the commit
-- step runs as the schema owner, under a try-lock); when it can not be made now (another session is
-- making it, a read-only transaction, DDL refused), the statement itself runs this once.
-- drop_queue drops it with the queue's other functions.
-- p_replace (create_queue, through outbox._install_heads_trigger): the function is made again in
-- place (CREATE OR REPLACE: a producer's commit step running it meanwhile keeps working; dropped
-- and made again, it failed with "cache lookup failed for function"), and the queue's late-rows
-- functions of other names (another table or column, an older seed) are dropped.
-- Returns the statement to EXECUTE with $1..$5 = keys, our smallest id of each, our transaction's
-- full id, our smallest id, the last id given out.
CREATE OR REPLACE FUNCTION outbox._late_rows_function(p_q outbox.queues, p_replace boolean DEFAULT false)
RETURNS text
LANGUAGE plpgsql
VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  v_table constant text := p_q.table_oid::regclass::text;
  -- 'pinned|': a function made before they pinned search_path = pg_catalog, pg_temp (00030; a
  -- producer's commit could still make one while that migration ran) is not reused.
  v_name constant text := '_q' || p_q.queue_id || '_late_' || pg_catalog.left(
    pg_catalog.md5('pinned|' || v_table || '|' || p_q.partition_column), 16);
  v_sql text;
BEGIN
  IF NOT p_replace AND pg_catalog.to_regproc('outbox.' || v_name) IS NOT NULL THEN
    RETURN pg_catalog.format('SELECT outbox.%I($1, $2, $3, $4, $5)', v_name);
  END IF;
  IF p_replace THEN
    PERFORM outbox._drop_functions('^_q' || p_q.queue_id || '_late_(?!' || pg_catalog.substr(v_name, pg_catalog.length(v_name) - 15) || '$)');
  END IF;
  -- One pass over the range, whatever the number of keys: a key's membership is a lookup in a
  -- jsonb object of our keys, and the answer per key another (no join: this runs under the commit
  -- step's planner settings, and a nested loop over thousands of keys would be quadratic). A
  -- visible row whose xmin is in progress is ours (a savepoint's): its full xid, widened from 32
  -- bits against ours ($3), as outbox._written_here does.
  v_sql := pg_catalog.format(
    'SELECT pg_catalog.array_agg(CASE WHEN (m.j ->> u.k)::bigint > u.lo THEN (m.j ->> u.k)::bigint END ORDER BY u.n)
     FROM (SELECT pg_catalog.jsonb_object_agg(r.k, r.hi) AS j
           FROM (SELECT t.%2$I::text AS k, pg_catalog.max(t.id) AS hi
                 FROM %1$s t
                 WHERE t.id > $4 AND t.id <= $5
                   AND (SELECT pg_catalog.jsonb_object_agg(x.k, true) FROM unnest($1::text[]) AS x(k)) ? t.%2$I::text
                   AND t.xmin::text::bigint <> $3 %% 4294967296
                   AND pg_catalog.pg_xact_status(($3 + ((t.xmin::text::bigint - ($3 %% 4294967296) + 6442450944) %% 4294967296
                                                       - 2147483648))::text::xid8) <> ''in progress''
                 GROUP BY 1) r) m
     CROSS JOIN unnest($1::text[], $2::bigint[]) WITH ORDINALITY AS u(k, lo, n)',
    v_table, p_q.partition_column);
  IF pg_catalog.current_setting('transaction_read_only') = 'off'
     AND (p_replace OR pg_catalog.pg_try_advisory_xact_lock(pg_catalog.hashtext('pgdrain._prepared'), pg_catalog.hashtext(v_name))) THEN
    BEGIN
      EXECUTE pg_catalog.format(
        'CREATE OR REPLACE FUNCTION outbox.%I(text[], bigint[], bigint, bigint, bigint) RETURNS bigint[] LANGUAGE plpgsql STABLE
         SET search_path = pg_catalog, pg_temp AS %L', v_name, 'BEGIN RETURN (' || v_sql || '); END');
      EXECUTE pg_catalog.format('REVOKE ALL ON FUNCTION outbox.%I(text[], bigint[], bigint, bigint, bigint) FROM PUBLIC', v_name);
      EXECUTE pg_catalog.format('COMMENT ON FUNCTION outbox.%I(text[], bigint[], bigint, bigint, bigint) IS %L', v_name,
        'pgdrain: the late-rows statement of queue ' || p_q.queue_id || ' (outbox._late_rows; internal)');
      RETURN pg_catalog.format('SELECT outbox.%I($1, $2, $3, $4, $5)', v_name);
    EXCEPTION WHEN OTHERS THEN
      NULL;
    END;
  END IF;
  RETURN v_sql;
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- Gives a partitioned queue its commit-step triggers:
-- - pgdrain_heads, a statement-level AFTER INSERT trigger running a function made for this queue,
--   outbox.tg_queue__heads_q<queue_id>, whose one statement names the partition column
--   statically, so PL/pgSQL plans it once per session instead of on every statement (a generic
--   function would need a dynamic EXECUTE). It notes the key and id of each new row for the commit
--   step, as outbox._note_written does; the first statement of a transaction, which inserts its
--   hook, inlined (one function call less on the usual transaction), later ones and SERIALIZABLE
--   transactions by calling it.
-- - pgdrain_snapshot, a statement-level BEFORE INSERT trigger that fires only in REPEATABLE READ
--   and SERIALIZABLE transactions (its WHEN costs a READ COMMITTED statement no function call):
--   outbox.tg_queue__snapshot_producer announces the transaction before it takes an id, so that
--   READ COMMITTED commit steps keep the clocks those transactions read (docs/ordering.md).
-- And makes the function of the commit step's late-rows statement (outbox._late_rows_function).
-- Made again by every create_queue, so they always match the registration (nothing else
-- reinstalls the triggers: run create_queue again if one was dropped).
-- SECURITY DEFINER like the other triggers: a producer can not write the notes.
CREATE OR REPLACE FUNCTION outbox._install_heads_trigger(p_q outbox.queues)
RETURNS void
LANGUAGE plpgsql
VOLATILE
SET search_path = pg_catalog, pg_temp
SET client_min_messages = warning
AS $$
DECLARE
  v_function constant text := 'outbox.' || pg_catalog.quote_ident('tg_queue__heads_q' || p_q.queue_id);
BEGIN
  EXECUTE pg_catalog.format(
    $f$CREATE OR REPLACE FUNCTION %1$s()
RETURNS trigger
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $body$
-- Made by outbox._install_heads_trigger for queue %2$s; do not edit.
DECLARE
  v_more boolean;
BEGIN
  IF pg_catalog.current_setting('transaction_isolation') = 'serializable' THEN
    -- Noted in the hook, see outbox._note_written.
    PERFORM outbox._note_written(TG_RELID, pg_catalog.array_agg(n.%3$I::text), pg_catalog.array_agg(n.id))
    FROM pgdrain_new_rows n WHERE n.sent_at IS NULL
    HAVING pg_catalog.count(*) > 0;
    RETURN NULL;
  END IF;
  -- The transaction's first statement notes in its hook; later ones in outbox.commit_notes, the
  -- first of them marking the hook (true comes back only from that update; nothing from later ones).
  INSERT INTO outbox.commit_hooks AS h (xid, table_oids, keys, ids)
  SELECT pg_catalog.pg_current_xact_id(), pg_catalog.array_agg(TG_RELID), pg_catalog.array_agg(n.%3$I::text),
         pg_catalog.array_agg(n.id)
  FROM pgdrain_new_rows n WHERE n.sent_at IS NULL
  HAVING pg_catalog.count(*) > 0
  ON CONFLICT (xid) DO UPDATE SET more_notes = true WHERE NOT h.more_notes
  RETURNING h.more_notes INTO v_more;
  IF v_more OR NOT FOUND THEN
    INSERT INTO outbox.commit_notes (table_oid, keys, ids)
    SELECT TG_RELID, pg_catalog.array_agg(n.%3$I::text), pg_catalog.array_agg(n.id)
    FROM pgdrain_new_rows n WHERE n.sent_at IS NULL
    HAVING pg_catalog.count(*) > 0;
  END IF;
  RETURN NULL;
END;
$body$
$f$, v_function, pg_catalog.quote_literal(p_q.queue), p_q.partition_column);
  EXECUTE pg_catalog.format('REVOKE ALL ON FUNCTION %s() FROM PUBLIC', v_function);
  -- Triggers in place are left as they are (the function above was replaced in place): dropping
  -- one locks the table (outbox._trigger_in_place).
  IF NOT outbox._trigger_in_place(p_q.table_oid, 'pgdrain_heads', (v_function || '()')::regprocedure, 4, '{}',
                                  false, 'pgdrain_new_rows') THEN
    EXECUTE pg_catalog.format('DROP TRIGGER IF EXISTS pgdrain_heads ON %s', p_q.table_oid::regclass);
    EXECUTE pg_catalog.format(
      'CREATE TRIGGER pgdrain_heads AFTER INSERT ON %s REFERENCING NEW TABLE AS pgdrain_new_rows
         FOR EACH STATEMENT EXECUTE FUNCTION %s()', p_q.table_oid::regclass, v_function);
  END IF;
  IF NOT outbox._trigger_in_place(p_q.table_oid, 'pgdrain_snapshot', 'outbox.tg_queue__snapshot_producer()', 6,
                                  ARRAY[outbox._snapshot_lock_class()::text, p_q.queue_id::text], true) THEN
    EXECUTE pg_catalog.format('DROP TRIGGER IF EXISTS pgdrain_snapshot ON %s', p_q.table_oid::regclass);
    EXECUTE pg_catalog.format(
      $f$CREATE TRIGGER pgdrain_snapshot BEFORE INSERT ON %s FOR EACH STATEMENT
         WHEN (pg_catalog.current_setting('transaction_isolation') <> 'read committed')
         EXECUTE FUNCTION outbox.tg_queue__snapshot_producer(%s, %s)$f$,
      p_q.table_oid::regclass, outbox._snapshot_lock_class(), p_q.queue_id);
  END IF;
  -- The commit step's late-rows statement, made now rather than by a producer's commit, and made
  -- again in place: its name says the table and column it reads, not the statement, so a migration
  -- that changes the statement (and reinstalls these triggers, as migrations do) replaces it here.
  PERFORM outbox._late_rows_function(p_q, true);
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
  SELECT '0.1.0'::text, 37;
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
ALTER FUNCTION outbox.release_lease(text, bigint) SECURITY DEFINER;
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
  outbox.release_lease(text, bigint)
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
DROP FUNCTION outbox._late_rows_function(outbox.queues, boolean);
-- +goose StatementEnd

-- +goose StatementBegin
-- The function that runs outbox._late_rows' statement for a queue, made for the queue and its table
-- as registered and named now: outbox._q<queue_id>_late_<hash of the table and column>, static
-- SQL, so PL/pgSQL keeps its plan for the session. A renamed table or column finds no function of
-- its name and gets one. Made by create_queue (so that producers' commits do not make it) and
-- otherwise by the first commit that needs it, as outbox._prepared makes its functions (the commit
-- step runs as the schema owner, under a try-lock); when it can not be made now (another session is
-- making it, a read-only transaction, DDL refused), the statement itself runs this once.
-- drop_queue drops it with the queue's other functions.
-- Returns the statement to EXECUTE with $1..$5 = keys, our smallest id of each, our transaction's
-- full id, our smallest id, the last id given out.
CREATE OR REPLACE FUNCTION outbox._late_rows_function(p_q outbox.queues)
RETURNS text
LANGUAGE plpgsql
VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  v_table constant text := p_q.table_oid::regclass::text;
  -- 'pinned|': a function made before they pinned search_path = pg_catalog, pg_temp (00030; a
  -- producer's commit could still make one while that migration ran) is not reused.
  v_name constant text := '_q' || p_q.queue_id || '_late_' || pg_catalog.left(
    pg_catalog.md5('pinned|' || v_table || '|' || p_q.partition_column), 16);
  v_sql text;
BEGIN
  IF pg_catalog.to_regproc('outbox.' || v_name) IS NOT NULL THEN
    RETURN pg_catalog.format('SELECT outbox.%I($1, $2, $3, $4, $5)', v_name);
  END IF;
  -- One pass over the range, whatever the number of keys: a key's membership is a lookup in a
  -- jsonb object of our keys, and the answer per key another (no join: this runs under the commit
  -- step's planner settings, and a nested loop over thousands of keys would be quadratic). A
  -- visible row whose xmin is in progress is ours (a savepoint's): its full xid, widened from 32
  -- bits against ours ($3), as outbox._written_here does.
  v_sql := pg_catalog.format(
    'SELECT pg_catalog.array_agg(CASE WHEN (m.j ->> u.k)::bigint > u.lo THEN (m.j ->> u.k)::bigint END ORDER BY u.n)
     FROM (SELECT pg_catalog.jsonb_object_agg(r.k, r.hi) AS j
           FROM (SELECT t.%2$I::text AS k, pg_catalog.max(t.id) AS hi
                 FROM %1$s t
                 WHERE t.id > $4 AND t.id <= $5
                   AND (SELECT pg_catalog.jsonb_object_agg(x.k, true) FROM unnest($1::text[]) AS x(k)) ? t.%2$I::text
                   AND t.xmin::text::bigint <> $3 %% 4294967296
                   AND pg_catalog.pg_xact_status(($3 + ((t.xmin::text::bigint - ($3 %% 4294967296) + 6442450944) %% 4294967296
                                                       - 2147483648))::text::xid8) <> ''in progress''
                 GROUP BY 1) r) m
     CROSS JOIN unnest($1::text[], $2::bigint[]) WITH ORDINALITY AS u(k, lo, n)',
    v_table, p_q.partition_column);
  IF pg_catalog.current_setting('transaction_read_only') = 'off'
     AND pg_catalog.pg_try_advisory_xact_lock(pg_catalog.hashtext('pgdrain._prepared'), pg_catalog.hashtext(v_name)) THEN
    BEGIN
      EXECUTE pg_catalog.format(
        'CREATE FUNCTION outbox.%I(text[], bigint[], bigint, bigint, bigint) RETURNS bigint[] LANGUAGE plpgsql STABLE
         SET search_path = pg_catalog, pg_temp AS %L', v_name, 'BEGIN RETURN (' || v_sql || '); END');
      EXECUTE pg_catalog.format('REVOKE ALL ON FUNCTION outbox.%I(text[], bigint[], bigint, bigint, bigint) FROM PUBLIC', v_name);
      EXECUTE pg_catalog.format('COMMENT ON FUNCTION outbox.%I(text[], bigint[], bigint, bigint, bigint) IS %L', v_name,
        'pgdrain: the late-rows statement of queue ' || p_q.queue_id || ' (outbox._late_rows; internal)');
      RETURN pg_catalog.format('SELECT outbox.%I($1, $2, $3, $4, $5)', v_name);
    EXCEPTION WHEN OTHERS THEN
      NULL;
    END;
  END IF;
  RETURN v_sql;
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- Gives a partitioned queue its commit-step triggers:
-- - pgdrain_heads, a statement-level AFTER INSERT trigger running a function made for this queue,
--   outbox.tg_queue__heads_q<queue_id>, whose one statement names the partition column
--   statically, so PL/pgSQL plans it once per session instead of on every statement (a generic
--   function would need a dynamic EXECUTE). It notes the key and id of each new row for the commit
--   step, as outbox._note_written does; the first statement of a transaction, which inserts its
--   hook, inlined (one function call less on the usual transaction), later ones and SERIALIZABLE
--   transactions by calling it.
-- - pgdrain_snapshot, a statement-level BEFORE INSERT trigger that fires only in REPEATABLE READ
--   and SERIALIZABLE transactions (its WHEN costs a READ COMMITTED statement no function call):
--   outbox.tg_queue__snapshot_producer announces the transaction before it takes an id, so that
--   READ COMMITTED commit steps keep the clocks those transactions read (docs/ordering.md).
-- And makes the function of the commit step's late-rows statement (outbox._late_rows_function).
-- Made again by every create_queue, so they always match the registration (nothing else
-- reinstalls the triggers: run create_queue again if one was dropped).
-- SECURITY DEFINER like the other triggers: a producer can not write the notes.
CREATE OR REPLACE FUNCTION outbox._install_heads_trigger(p_q outbox.queues)
RETURNS void
LANGUAGE plpgsql
VOLATILE
SET search_path = pg_catalog, pg_temp
SET client_min_messages = warning
AS $$
DECLARE
  v_function constant text := 'outbox.' || pg_catalog.quote_ident('tg_queue__heads_q' || p_q.queue_id);
BEGIN
  EXECUTE pg_catalog.format(
    $f$CREATE OR REPLACE FUNCTION %1$s()
RETURNS trigger
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $body$
-- Made by outbox._install_heads_trigger for queue %2$s; do not edit.
DECLARE
  v_more boolean;
BEGIN
  IF pg_catalog.current_setting('transaction_isolation') = 'serializable' THEN
    -- Noted in the hook, see outbox._note_written.
    PERFORM outbox._note_written(TG_RELID, pg_catalog.array_agg(n.%3$I::text), pg_catalog.array_agg(n.id))
    FROM pgdrain_new_rows n WHERE n.sent_at IS NULL
    HAVING pg_catalog.count(*) > 0;
    RETURN NULL;
  END IF;
  -- The transaction's first statement notes in its hook; later ones in outbox.commit_notes, the
  -- first of them marking the hook (true comes back only from that update; nothing from later ones).
  INSERT INTO outbox.commit_hooks AS h (xid, table_oids, keys, ids)
  SELECT pg_catalog.pg_current_xact_id(), pg_catalog.array_agg(TG_RELID), pg_catalog.array_agg(n.%3$I::text),
         pg_catalog.array_agg(n.id)
  FROM pgdrain_new_rows n WHERE n.sent_at IS NULL
  HAVING pg_catalog.count(*) > 0
  ON CONFLICT (xid) DO UPDATE SET more_notes = true WHERE NOT h.more_notes
  RETURNING h.more_notes INTO v_more;
  IF v_more OR NOT FOUND THEN
    INSERT INTO outbox.commit_notes (table_oid, keys, ids)
    SELECT TG_RELID, pg_catalog.array_agg(n.%3$I::text), pg_catalog.array_agg(n.id)
    FROM pgdrain_new_rows n WHERE n.sent_at IS NULL
    HAVING pg_catalog.count(*) > 0;
  END IF;
  RETURN NULL;
END;
$body$
$f$, v_function, pg_catalog.quote_literal(p_q.queue), p_q.partition_column);
  EXECUTE pg_catalog.format('REVOKE ALL ON FUNCTION %s() FROM PUBLIC', v_function);
  -- Triggers in place are left as they are (the function above was replaced in place): dropping
  -- one locks the table (outbox._trigger_in_place).
  IF NOT outbox._trigger_in_place(p_q.table_oid, 'pgdrain_heads', (v_function || '()')::regprocedure, 4, '{}',
                                  false, 'pgdrain_new_rows') THEN
    EXECUTE pg_catalog.format('DROP TRIGGER IF EXISTS pgdrain_heads ON %s', p_q.table_oid::regclass);
    EXECUTE pg_catalog.format(
      'CREATE TRIGGER pgdrain_heads AFTER INSERT ON %s REFERENCING NEW TABLE AS pgdrain_new_rows
         FOR EACH STATEMENT EXECUTE FUNCTION %s()', p_q.table_oid::regclass, v_function);
  END IF;
  IF NOT outbox._trigger_in_place(p_q.table_oid, 'pgdrain_snapshot', 'outbox.tg_queue__snapshot_producer()', 6,
                                  ARRAY[outbox._snapshot_lock_class()::text, p_q.queue_id::text], true) THEN
    EXECUTE pg_catalog.format('DROP TRIGGER IF EXISTS pgdrain_snapshot ON %s', p_q.table_oid::regclass);
    EXECUTE pg_catalog.format(
      $f$CREATE TRIGGER pgdrain_snapshot BEFORE INSERT ON %s FOR EACH STATEMENT
         WHEN (pg_catalog.current_setting('transaction_isolation') <> 'read committed')
         EXECUTE FUNCTION outbox.tg_queue__snapshot_producer(%s, %s)$f$,
      p_q.table_oid::regclass, outbox._snapshot_lock_class(), p_q.queue_id);
  END IF;
  -- The commit step's late-rows statement, made now rather than by a producer's commit, and made
  -- again: its name says the table and column it reads, not the statement, so a migration that
  -- changes the statement (and reinstalls these triggers, as migrations do) replaces it here.
  PERFORM outbox._drop_functions('^_q' || p_q.queue_id || '_late_');
  PERFORM outbox._late_rows_function(p_q);
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
  SELECT '0.1.0'::text, 36;
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
ALTER FUNCTION outbox.release_lease(text, bigint) SECURITY DEFINER;
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
  outbox.release_lease(text, bigint)
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
