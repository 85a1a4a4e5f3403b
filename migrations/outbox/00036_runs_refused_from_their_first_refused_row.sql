-- +goose Up
-- +goose StatementBegin
-- Records outcomes for rows, the common core of apply_result(s) (p_tokens given: only rows whose
-- lease_token still matches) and settle_locked (p_tokens NULL: the caller checked it holds the
-- row locks). A row that does not qualify is not touched at all. Every outcome clears lease and
-- token together. 'transient' adds an attempt with backoff; on a partitioned queue it is capped
-- at max_attempts - 1 so a partition head is never poisoned by a transient failure. 'permanent'
-- poisons (attempt_count = max_attempts) unless the queue's policy is 'retry'.
-- A backoff is counted from the clock when the outcome is recorded, not from now() (the
-- transaction start): in lock mode the claiming transaction has been open for the whole delivery,
-- and a backoff counted from its start could be over before it is written. sent_at is a record,
-- not a deadline: it stays now(), the time of the transaction that made the row sent. A sent row's
-- last_error is cleared (its attempt_count still says how many attempts failed before): a delivered
-- row showing an old error read as a failure (issue 32).
-- p_retry_at (NULL, or aligned with p_ids; NULL elements = backoff) sets a transient row's next
-- attempt to a time the caller chose (a peer's Retry-After), never earlier than the clock.
-- A run (several rows of a key in one call, lease mode) is recorded up to its first row that is
-- refused while still deliverable (its token is another worker's now: the lease ran out and the row
-- was claimed again, or an operator released it): the key's later rows are refused too. Recorded,
-- they were sent while a row before them was still to be delivered, which would then come after
-- them. As read by the statement's snapshot.
CREATE OR REPLACE FUNCTION outbox._record(p_q outbox.queues, p_ids bigint[], p_tokens uuid[],
                                          p_outcomes text[], p_errors text[], p_retry_at timestamptz[])
RETURNS bigint[]
LANGUAGE plpgsql
VOLATILE
SET search_path = pg_catalog, pg_temp
SET enable_seqscan = off
SET plan_cache_mode = force_generic_plan
SET jit = off
AS $$
DECLARE
  v_done bigint[];
  v_keys text[];
  v_cap integer := CASE WHEN p_q.partition_column IS NULL THEN p_q.max_attempts ELSE p_q.max_attempts - 1 END;
  v_clock timestamptz := pg_catalog.clock_timestamp();
BEGIN
  EXECUTE outbox._prepared(p_q.queue_id, pg_catalog.format(
    'WITH input AS (
       SELECT u.id, u.token, u.outcome, u.err, u.retry_at
       FROM unnest($1::bigint[], $2::uuid[], $3::text[], $4::text[], $11::timestamptz[])
         AS u(id, token, outcome, err, retry_at)),%4$s
     upd AS (
       -- The attempts a failure leaves are computed from the row being updated, not read in a join
       -- before it: one index probe per row instead of two.
       UPDATE %1$s t SET
         sent_at = CASE WHEN i.outcome = ''sent'' THEN pg_catalog.now() END,
         attempt_count = CASE WHEN i.outcome = ''sent'' THEN t.attempt_count ELSE %3$s END,
         next_attempt_at = CASE
           WHEN i.outcome = ''sent'' THEN t.next_attempt_at
           WHEN %3$s >= $6 THEN NULL
           WHEN i.retry_at IS NOT NULL THEN GREATEST(i.retry_at, $10)
           ELSE $10 + outbox._backoff(%3$s, $8, $9) END,
         last_error = CASE WHEN i.outcome = ''sent'' THEN NULL ELSE i.err END,
         leased_until = NULL,
         lease_token = NULL
       FROM input i
       WHERE t.id = i.id AND t.sent_at IS NULL AND ($2 IS NULL OR t.lease_token = i.token)%5$s
       RETURNING t.id, %2$s AS key)
     SELECT pg_catalog.array_agg(upd.id), pg_catalog.array_agg(DISTINCT upd.key) FROM upd',
    p_q.table_oid::regclass,
    CASE WHEN p_q.partition_column IS NULL THEN 'NULL::text'
         ELSE pg_catalog.format('t.%I::text', p_q.partition_column) END,
    -- Never fewer attempts than the row has: a row poisoned by a lowered max_attempts while it was
    -- leased stays poisoned.
    '(CASE WHEN i.outcome = ''permanent'' AND $5 = ''poison'' THEN $6
           ELSE GREATEST(t.attempt_count, LEAST(t.attempt_count + 1, $7)) END)',
    CASE WHEN p_q.partition_column IS NOT NULL THEN pg_catalog.format('
     refused AS MATERIALIZED (
       SELECT r.%2$I::text AS key, r.id FROM input j JOIN %1$s r ON r.id = j.id
       WHERE $2 IS NOT NULL AND r.sent_at IS NULL AND r.attempt_count < $6
         AND r.lease_token IS DISTINCT FROM j.token),', p_q.table_oid::regclass, p_q.partition_column) ELSE '' END,
    CASE WHEN p_q.partition_column IS NOT NULL THEN pg_catalog.format('
         AND NOT EXISTS (SELECT 1 FROM refused f WHERE f.key = t.%I::text AND f.id < t.id)', p_q.partition_column)
         ELSE '' END),
    'bigint[], uuid[], text[], text[], text, integer, integer, interval, interval, timestamptz, timestamptz[]',
    'TABLE(pgdrain_ids bigint[], pgdrain_keys text[])')
    INTO v_done, v_keys
    USING p_ids, p_tokens, p_outcomes, p_errors, p_q.permanent_policy, p_q.max_attempts, v_cap,
          p_q.backoff_min, p_q.backoff_max, v_clock, p_retry_at;

  IF p_q.partition_column IS NOT NULL AND v_keys IS NOT NULL THEN
    PERFORM outbox._refresh_heads(p_q, pg_catalog.array_remove(v_keys, NULL));
  END IF;
  RETURN COALESCE(v_done, '{}');
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- The statement to EXECUTE for p_sql, a statement of queue p_queue_id built with format() whose
-- parameters $1..$n have the types p_args (comma-separated, in order): a call of a function whose
-- body is p_sql as static SQL, so its plan is made once per session instead of on every EXECUTE
-- (planning the claim, record and refresh statements cost as much as running them); p_sql itself
-- when no such function can be had. Both take the same parameters, so the caller's USING list
-- serves either. p_returns is the function's result: 'void', or 'TABLE(...)' whose columns the
-- statement's columns match exactly.
--
-- The function forces a generic plan: left to choose, the plan cache kept planning some of these
-- statements again on every call (a claim's read-back: 465 of 716 calls planned, about 50 µs
-- each), because a generic plan of `= ANY ($1)` looks dearer than a custom one for a short array.
--
-- The function is named for what it runs (queue id and a hash of p_args, p_returns and p_sql): a
-- statement that changes (a new migration, a queue registered again with another table or column)
-- finds no function of that name and makes its own, and one that was dropped is made again, so
-- there is no state to drift. It is made by the first call that needs it, as the caller's
-- current user (the schema owner: the callers are SECURITY DEFINER), executable by nobody else,
-- under a try-lock: a session that does not get the lock, may not create functions in outbox, or
-- runs a read-only transaction (a standby) runs p_sql this once.
-- drop_queue drops a queue's functions.
CREATE OR REPLACE FUNCTION outbox._prepared(p_queue_id integer, p_sql text, p_args text, p_returns text)
RETURNS text
LANGUAGE plpgsql
VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  -- md5 and to_regproc (a name, no argument types to parse): this runs before every statement.
  -- 'generic pinned|': a function made before they forced generic plans, or before they pinned
  -- search_path = pg_catalog, pg_temp (00030; an older session's call could still make one while
  -- that migration ran), is not reused.
  v_name constant text := '_q' || p_queue_id || '_' || pg_catalog.left(
    pg_catalog.md5('generic pinned|' || p_args || '|' || p_returns || '|' || p_sql), 24);
  v_signature text;
  v_fn regproc := pg_catalog.to_regproc(pg_catalog.format('outbox.%I', v_name));
  v_params text := '';
BEGIN
  FOR n IN 1..pg_catalog.length(p_args) - pg_catalog.length(pg_catalog.replace(p_args, ',', '')) + 1 LOOP
    v_params := v_params || CASE WHEN n > 1 THEN ', $' ELSE '$' END || n;
  END LOOP;
  IF p_args = '' THEN
    v_params := '';
  END IF;
  IF v_fn IS NULL THEN
    IF pg_catalog.current_setting('transaction_read_only') = 'on'
       OR NOT pg_catalog.has_schema_privilege('outbox', 'CREATE')
       OR NOT pg_catalog.pg_try_advisory_xact_lock(pg_catalog.hashtext('pgdrain._prepared'), pg_catalog.hashtext(v_name)) THEN
      RETURN p_sql;
    END IF;
    v_signature := pg_catalog.format('outbox.%I(%s)', v_name, p_args);
    -- Making it must never fail the caller: another session may have made it since the lookup
    -- above (and this session's catalog cache may not know yet), or an event trigger may refuse
    -- DDL. Any of these only means running p_sql this once (the subtransaction is paid only here).
    BEGIN
      EXECUTE pg_catalog.format(
        'CREATE FUNCTION outbox.%I(%s) RETURNS %s LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, pg_temp '
        'SET plan_cache_mode = force_generic_plan AS %L',
        v_name, p_args, p_returns,
        CASE WHEN p_returns = 'void' THEN 'BEGIN ' || p_sql || '; END'
             ELSE 'BEGIN RETURN QUERY ' || p_sql || '; END' END);
      EXECUTE pg_catalog.format('REVOKE ALL ON FUNCTION %s FROM PUBLIC', v_signature);
      EXECUTE pg_catalog.format('COMMENT ON FUNCTION %s IS %L', v_signature,
        'pgdrain: one statement of queue ' || p_queue_id || ' with its plan kept (outbox._prepared; internal)');
    EXCEPTION WHEN OTHERS THEN
      RETURN p_sql;
    END;
    v_fn := pg_catalog.to_regproc(pg_catalog.format('outbox.%I', v_name));
  END IF;
  IF NOT pg_catalog.has_function_privilege(v_fn, 'EXECUTE') THEN
    RETURN p_sql;
  END IF;
  RETURN CASE WHEN p_returns = 'void' THEN pg_catalog.format('SELECT outbox.%I(%s)', v_name, v_params)
              ELSE pg_catalog.format('SELECT * FROM outbox.%I(%s)', v_name, v_params) END;
END;
$$;
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
-- Functions an older session still made with search_path = '' while 00030 ran (kept statements,
-- late-rows functions: its calls in flight finished with the old code) are pinned as 00030 pinned
-- the rest, and the kept statements are dropped: their names changed with this migration
-- (outbox._prepared, outbox._late_rows_function), so none made by old code is called again.
DO $$
DECLARE
  v_fn regprocedure;
BEGIN
  FOR v_fn IN SELECT p.oid::regprocedure FROM pg_catalog.pg_proc p
              WHERE p.pronamespace = 'outbox'::regnamespace AND 'search_path=""' = ANY (p.proconfig)
              ORDER BY p.oid LOOP
    EXECUTE pg_catalog.format('ALTER FUNCTION %s SET search_path = pg_catalog, pg_temp', v_fn);
  END LOOP;
END;
$$;
SELECT outbox._forget_kept_statements();
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
-- Records outcomes for rows, the common core of apply_result(s) (p_tokens given: only rows whose
-- lease_token still matches) and settle_locked (p_tokens NULL: the caller checked it holds the
-- row locks). A row that does not qualify is not touched at all. Every outcome clears lease and
-- token together. 'transient' adds an attempt with backoff; on a partitioned queue it is capped
-- at max_attempts - 1 so a partition head is never poisoned by a transient failure. 'permanent'
-- poisons (attempt_count = max_attempts) unless the queue's policy is 'retry'.
-- A backoff is counted from the clock when the outcome is recorded, not from now() (the
-- transaction start): in lock mode the claiming transaction has been open for the whole delivery,
-- and a backoff counted from its start could be over before it is written. sent_at is a record,
-- not a deadline: it stays now(), the time of the transaction that made the row sent. A sent row's
-- last_error is cleared (its attempt_count still says how many attempts failed before): a delivered
-- row showing an old error read as a failure (issue 32).
-- p_retry_at (NULL, or aligned with p_ids; NULL elements = backoff) sets a transient row's next
-- attempt to a time the caller chose (a peer's Retry-After), never earlier than the clock.
CREATE OR REPLACE FUNCTION outbox._record(p_q outbox.queues, p_ids bigint[], p_tokens uuid[],
                                          p_outcomes text[], p_errors text[], p_retry_at timestamptz[])
RETURNS bigint[]
LANGUAGE plpgsql
VOLATILE
SET search_path = pg_catalog, pg_temp
SET enable_seqscan = off
SET plan_cache_mode = force_generic_plan
SET jit = off
AS $$
DECLARE
  v_done bigint[];
  v_keys text[];
  v_cap integer := CASE WHEN p_q.partition_column IS NULL THEN p_q.max_attempts ELSE p_q.max_attempts - 1 END;
  v_clock timestamptz := pg_catalog.clock_timestamp();
BEGIN
  EXECUTE outbox._prepared(p_q.queue_id, pg_catalog.format(
    'WITH input AS (
       SELECT u.id, u.token, u.outcome, u.err, u.retry_at
       FROM unnest($1::bigint[], $2::uuid[], $3::text[], $4::text[], $11::timestamptz[])
         AS u(id, token, outcome, err, retry_at)),
     upd AS (
       -- The attempts a failure leaves are computed from the row being updated, not read in a join
       -- before it: one index probe per row instead of two.
       UPDATE %1$s t SET
         sent_at = CASE WHEN i.outcome = ''sent'' THEN pg_catalog.now() END,
         attempt_count = CASE WHEN i.outcome = ''sent'' THEN t.attempt_count ELSE %3$s END,
         next_attempt_at = CASE
           WHEN i.outcome = ''sent'' THEN t.next_attempt_at
           WHEN %3$s >= $6 THEN NULL
           WHEN i.retry_at IS NOT NULL THEN GREATEST(i.retry_at, $10)
           ELSE $10 + outbox._backoff(%3$s, $8, $9) END,
         last_error = CASE WHEN i.outcome = ''sent'' THEN NULL ELSE i.err END,
         leased_until = NULL,
         lease_token = NULL
       FROM input i
       WHERE t.id = i.id AND t.sent_at IS NULL AND ($2 IS NULL OR t.lease_token = i.token)
       RETURNING t.id, %2$s AS key)
     SELECT pg_catalog.array_agg(upd.id), pg_catalog.array_agg(DISTINCT upd.key) FROM upd',
    p_q.table_oid::regclass,
    CASE WHEN p_q.partition_column IS NULL THEN 'NULL::text'
         ELSE pg_catalog.format('t.%I::text', p_q.partition_column) END,
    -- Never fewer attempts than the row has: a row poisoned by a lowered max_attempts while it was
    -- leased stays poisoned.
    '(CASE WHEN i.outcome = ''permanent'' AND $5 = ''poison'' THEN $6
           ELSE GREATEST(t.attempt_count, LEAST(t.attempt_count + 1, $7)) END)'),
    'bigint[], uuid[], text[], text[], text, integer, integer, interval, interval, timestamptz, timestamptz[]',
    'TABLE(pgdrain_ids bigint[], pgdrain_keys text[])')
    INTO v_done, v_keys
    USING p_ids, p_tokens, p_outcomes, p_errors, p_q.permanent_policy, p_q.max_attempts, v_cap,
          p_q.backoff_min, p_q.backoff_max, v_clock, p_retry_at;

  IF p_q.partition_column IS NOT NULL AND v_keys IS NOT NULL THEN
    PERFORM outbox._refresh_heads(p_q, pg_catalog.array_remove(v_keys, NULL));
  END IF;
  RETURN COALESCE(v_done, '{}');
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- The statement to EXECUTE for p_sql, a statement of queue p_queue_id built with format() whose
-- parameters $1..$n have the types p_args (comma-separated, in order): a call of a function whose
-- body is p_sql as static SQL, so its plan is made once per session instead of on every EXECUTE
-- (planning the claim, record and refresh statements cost as much as running them); p_sql itself
-- when no such function can be had. Both take the same parameters, so the caller's USING list
-- serves either. p_returns is the function's result: 'void', or 'TABLE(...)' whose columns the
-- statement's columns match exactly.
--
-- The function forces a generic plan: left to choose, the plan cache kept planning some of these
-- statements again on every call (a claim's read-back: 465 of 716 calls planned, about 50 µs
-- each), because a generic plan of `= ANY ($1)` looks dearer than a custom one for a short array.
--
-- The function is named for what it runs (queue id and a hash of p_args, p_returns and p_sql): a
-- statement that changes (a new migration, a queue registered again with another table or column)
-- finds no function of that name and makes its own, and one that was dropped is made again, so
-- there is no state to drift. It is made by the first call that needs it, as the caller's
-- current user (the schema owner: the callers are SECURITY DEFINER), executable by nobody else,
-- under a try-lock: a session that does not get the lock, may not create functions in outbox, or
-- runs a read-only transaction (a standby) runs p_sql this once.
-- drop_queue drops a queue's functions.
CREATE OR REPLACE FUNCTION outbox._prepared(p_queue_id integer, p_sql text, p_args text, p_returns text)
RETURNS text
LANGUAGE plpgsql
VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  -- md5 and to_regproc (a name, no argument types to parse): this runs before every statement.
  -- 'generic|': a function made before they forced generic plans is not reused.
  v_name constant text := '_q' || p_queue_id || '_' || pg_catalog.left(
    pg_catalog.md5('generic|' || p_args || '|' || p_returns || '|' || p_sql), 24);
  v_signature text;
  v_fn regproc := pg_catalog.to_regproc(pg_catalog.format('outbox.%I', v_name));
  v_params text := '';
BEGIN
  FOR n IN 1..pg_catalog.length(p_args) - pg_catalog.length(pg_catalog.replace(p_args, ',', '')) + 1 LOOP
    v_params := v_params || CASE WHEN n > 1 THEN ', $' ELSE '$' END || n;
  END LOOP;
  IF p_args = '' THEN
    v_params := '';
  END IF;
  IF v_fn IS NULL THEN
    IF pg_catalog.current_setting('transaction_read_only') = 'on'
       OR NOT pg_catalog.has_schema_privilege('outbox', 'CREATE')
       OR NOT pg_catalog.pg_try_advisory_xact_lock(pg_catalog.hashtext('pgdrain._prepared'), pg_catalog.hashtext(v_name)) THEN
      RETURN p_sql;
    END IF;
    v_signature := pg_catalog.format('outbox.%I(%s)', v_name, p_args);
    -- Making it must never fail the caller: another session may have made it since the lookup
    -- above (and this session's catalog cache may not know yet), or an event trigger may refuse
    -- DDL. Any of these only means running p_sql this once (the subtransaction is paid only here).
    BEGIN
      EXECUTE pg_catalog.format(
        'CREATE FUNCTION outbox.%I(%s) RETURNS %s LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, pg_temp '
        'SET plan_cache_mode = force_generic_plan AS %L',
        v_name, p_args, p_returns,
        CASE WHEN p_returns = 'void' THEN 'BEGIN ' || p_sql || '; END'
             ELSE 'BEGIN RETURN QUERY ' || p_sql || '; END' END);
      EXECUTE pg_catalog.format('REVOKE ALL ON FUNCTION %s FROM PUBLIC', v_signature);
      EXECUTE pg_catalog.format('COMMENT ON FUNCTION %s IS %L', v_signature,
        'pgdrain: one statement of queue ' || p_queue_id || ' with its plan kept (outbox._prepared; internal)');
    EXCEPTION WHEN OTHERS THEN
      RETURN p_sql;
    END;
    v_fn := pg_catalog.to_regproc(pg_catalog.format('outbox.%I', v_name));
  END IF;
  IF NOT pg_catalog.has_function_privilege(v_fn, 'EXECUTE') THEN
    RETURN p_sql;
  END IF;
  RETURN CASE WHEN p_returns = 'void' THEN pg_catalog.format('SELECT outbox.%I(%s)', v_name, v_params)
              ELSE pg_catalog.format('SELECT * FROM outbox.%I(%s)', v_name, v_params) END;
END;
$$;
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
  v_name constant text := '_q' || p_q.queue_id || '_late_' || pg_catalog.left(
    pg_catalog.md5(v_table || '|' || p_q.partition_column), 16);
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
  SELECT '0.1.0'::text, 35;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
SELECT outbox._forget_kept_statements();
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
