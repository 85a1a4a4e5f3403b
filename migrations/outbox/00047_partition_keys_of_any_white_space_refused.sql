-- +goose Up
-- +goose StatementBegin
-- The insert behind enqueue and enqueue_event (p_function names the caller in errors): validates
-- the event and inserts it, returning its id (provisional until COMMIT on a partitioned queue, see
-- DESIGN "Identity and order of an event") and its event_id. deliver_at delays the first attempt,
-- at most the queue's max_delay (it is the row's next_attempt_at; on a partitioned queue it holds back the key's later events
-- too, which keep their order). headers (an object of strings) travel with the event to the sink.
CREATE OR REPLACE FUNCTION outbox._enqueue(p_function text, p_queue text, p_event_type text, p_payload jsonb,
                                           p_partition_key text, p_deliver_at timestamptz, p_headers jsonb,
                                           p_event_id uuid)
RETURNS TABLE(id bigint, event_id uuid)
LANGUAGE plpgsql
VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  v_q outbox.queues := outbox._queue(p_function, p_queue);
  v_key_column text := '';
  v_key_value text := '';
  v_key_read text;
  v_cast_error text;
BEGIN
  IF p_event_type IS NULL OR outbox._is_blank(p_event_type) THEN
    PERFORM outbox._invalid(p_function, 'event_type must be a non-empty string');
  END IF;
  IF p_payload IS NULL THEN
    PERFORM outbox._invalid(p_function, 'payload must not be NULL (use ''{}''::jsonb for an empty payload)');
  END IF;
  IF pg_catalog.jsonb_typeof(p_payload) = 'null' THEN
    PERFORM outbox._invalid(p_function, 'payload must not be JSON null (use ''{}''::jsonb for an empty payload)');
  END IF;
  IF p_deliver_at IN ('infinity', '-infinity') THEN
    PERFORM outbox._invalid(p_function, 'deliver_at must be a finite time (NULL: deliver now)');
  END IF;
  PERFORM outbox._check_delay(p_function, 'deliver_at', v_q, ARRAY[p_deliver_at], false);
  IF p_headers IS NOT NULL AND (pg_catalog.jsonb_typeof(p_headers) <> 'object'
                                OR pg_catalog.jsonb_path_exists(p_headers, '$.* ? (@.type() != "string")')) THEN
    PERFORM outbox._invalid(p_function, pg_catalog.format(
      'headers must be NULL or a JSON object whose values are strings, got %s', pg_catalog.left(p_headers::text, 200)));
  END IF;
  IF v_q.partition_column IS NULL THEN
    IF p_partition_key IS NOT NULL THEN
      PERFORM outbox._invalid(p_function, pg_catalog.format(
        'partition_key must be NULL: queue %s has no partition column', v_q.queue));
    END IF;
  ELSE
    IF p_partition_key IS NULL THEN
      PERFORM outbox._invalid(p_function, pg_catalog.format(
        'partition_key must not be NULL: queue %s is partitioned by %s', v_q.queue, v_q.partition_column));
    END IF;
    -- Blank as event_type is (every Unicode space, zero-width characters): producers that lost
    -- their key would otherwise share one partition under a key nobody can see.
    IF outbox._is_blank(p_partition_key) THEN
      -- Named by code point unless plain spaces: the characters themselves show nothing.
      PERFORM outbox._invalid(p_function, pg_catalog.format('partition_key must be a non-empty string, got %s',
        CASE WHEN p_partition_key ~ '^ *$' THEN pg_catalog.quote_literal(p_partition_key)
             ELSE pg_catalog.format('only white space and invisible characters (%s%s)',
               (SELECT pg_catalog.string_agg('U+' || pg_catalog.upper(pg_catalog.lpad(pg_catalog.to_hex(pg_catalog.ascii(c.ch)), 4, '0')),
                                             ' ' ORDER BY c.n)
                FROM pg_catalog.regexp_split_to_table(pg_catalog.left(p_partition_key, 20), '') WITH ORDINALITY AS c(ch, n)),
               CASE WHEN pg_catalog.length(p_partition_key) > 20 THEN ' ...' ELSE '' END) END));
    END IF;
    -- A key column of another type than text: the key must read as one of its values, said here
    -- with the argument's name (the INSERT's cast error named neither the function nor
    -- partition_key), and a varchar(n) or char(n) key must fit (an explicit cast cut it short:
    -- 'abcdefgh' became key 'abcde', another key's). In a block of its own, so a key of text
    -- costs nothing more.
    IF v_q.partition_type <> 'text' THEN
      BEGIN
        EXECUTE pg_catalog.format('SELECT $1::%s::text', v_q.partition_type) INTO v_key_read USING p_partition_key;
      EXCEPTION WHEN data_exception OR integrity_constraint_violation THEN
        GET STACKED DIAGNOSTICS v_cast_error = MESSAGE_TEXT;
        PERFORM outbox._invalid(p_function, pg_catalog.format(
          'partition_key must be a value of column %s (%s) of %s, got %s: %s', v_q.partition_column,
          v_q.partition_type, v_q.queue, pg_catalog.quote_literal(pg_catalog.left(p_partition_key, 200)), v_cast_error));
      END;
      -- A string type (varchar(n), char(n), a domain over one) cut the key short when the cast
      -- changed more than trailing spaces, which PostgreSQL drops from such a value too.
      IF v_key_read <> p_partition_key AND v_key_read <> pg_catalog.rtrim(p_partition_key, ' ')
         AND (SELECT t.typcategory FROM pg_catalog.pg_type t WHERE t.oid = pg_catalog.to_regtype(v_q.partition_type)) = 'S' THEN
        PERFORM outbox._invalid(p_function, pg_catalog.format(
          'partition_key must fit column %s (%s) of %s, got %s characters', v_q.partition_column,
          v_q.partition_type, v_q.queue, pg_catalog.length(p_partition_key)));
      END IF;
    END IF;
    v_key_column := pg_catalog.format(', %I', v_q.partition_column);
    v_key_value := pg_catalog.format(', $6::%s', v_q.partition_type);
  END IF;
  RETURN QUERY EXECUTE pg_catalog.format(
    'INSERT INTO %s AS t (event_type, payload, next_attempt_at, headers, event_id%s)
     VALUES ($1, $2, $3, $4, COALESCE($5, pg_catalog.gen_random_uuid())%s)
     RETURNING t.id, t.event_id',
    v_q.table_oid::regclass, v_key_column, v_key_value)
    USING p_event_type, p_payload, p_deliver_at, p_headers, p_event_id, p_partition_key;
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

-- +goose Down

-- +goose StatementBegin
-- The insert behind enqueue and enqueue_event (p_function names the caller in errors): validates
-- the event and inserts it, returning its id (provisional until COMMIT on a partitioned queue, see
-- DESIGN "Identity and order of an event") and its event_id. deliver_at delays the first attempt,
-- at most the queue's max_delay (it is the row's next_attempt_at; on a partitioned queue it holds back the key's later events
-- too, which keep their order). headers (an object of strings) travel with the event to the sink.
CREATE OR REPLACE FUNCTION outbox._enqueue(p_function text, p_queue text, p_event_type text, p_payload jsonb,
                                           p_partition_key text, p_deliver_at timestamptz, p_headers jsonb,
                                           p_event_id uuid)
RETURNS TABLE(id bigint, event_id uuid)
LANGUAGE plpgsql
VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  v_q outbox.queues := outbox._queue(p_function, p_queue);
  v_key_column text := '';
  v_key_value text := '';
  v_key_read text;
  v_cast_error text;
BEGIN
  IF p_event_type IS NULL OR outbox._is_blank(p_event_type) THEN
    PERFORM outbox._invalid(p_function, 'event_type must be a non-empty string');
  END IF;
  IF p_payload IS NULL THEN
    PERFORM outbox._invalid(p_function, 'payload must not be NULL (use ''{}''::jsonb for an empty payload)');
  END IF;
  IF pg_catalog.jsonb_typeof(p_payload) = 'null' THEN
    PERFORM outbox._invalid(p_function, 'payload must not be JSON null (use ''{}''::jsonb for an empty payload)');
  END IF;
  IF p_deliver_at IN ('infinity', '-infinity') THEN
    PERFORM outbox._invalid(p_function, 'deliver_at must be a finite time (NULL: deliver now)');
  END IF;
  PERFORM outbox._check_delay(p_function, 'deliver_at', v_q, ARRAY[p_deliver_at], false);
  IF p_headers IS NOT NULL AND (pg_catalog.jsonb_typeof(p_headers) <> 'object'
                                OR pg_catalog.jsonb_path_exists(p_headers, '$.* ? (@.type() != "string")')) THEN
    PERFORM outbox._invalid(p_function, pg_catalog.format(
      'headers must be NULL or a JSON object whose values are strings, got %s', pg_catalog.left(p_headers::text, 200)));
  END IF;
  IF v_q.partition_column IS NULL THEN
    IF p_partition_key IS NOT NULL THEN
      PERFORM outbox._invalid(p_function, pg_catalog.format(
        'partition_key must be NULL: queue %s has no partition column', v_q.queue));
    END IF;
  ELSE
    IF p_partition_key IS NULL THEN
      PERFORM outbox._invalid(p_function, pg_catalog.format(
        'partition_key must not be NULL: queue %s is partitioned by %s', v_q.queue, v_q.partition_column));
    END IF;
    IF pg_catalog.btrim(p_partition_key) = '' THEN
      PERFORM outbox._invalid(p_function, pg_catalog.format(
        'partition_key must be a non-empty string, got %s', pg_catalog.quote_literal(p_partition_key)));
    END IF;
    -- A key column of another type than text: the key must read as one of its values, said here
    -- with the argument's name (the INSERT's cast error named neither the function nor
    -- partition_key), and a varchar(n) or char(n) key must fit (an explicit cast cut it short:
    -- 'abcdefgh' became key 'abcde', another key's). In a block of its own, so a key of text
    -- costs nothing more.
    IF v_q.partition_type <> 'text' THEN
      BEGIN
        EXECUTE pg_catalog.format('SELECT $1::%s::text', v_q.partition_type) INTO v_key_read USING p_partition_key;
      EXCEPTION WHEN data_exception OR integrity_constraint_violation THEN
        GET STACKED DIAGNOSTICS v_cast_error = MESSAGE_TEXT;
        PERFORM outbox._invalid(p_function, pg_catalog.format(
          'partition_key must be a value of column %s (%s) of %s, got %s: %s', v_q.partition_column,
          v_q.partition_type, v_q.queue, pg_catalog.quote_literal(pg_catalog.left(p_partition_key, 200)), v_cast_error));
      END;
      -- A string type (varchar(n), char(n), a domain over one) cut the key short when the cast
      -- changed more than trailing spaces, which PostgreSQL drops from such a value too.
      IF v_key_read <> p_partition_key AND v_key_read <> pg_catalog.rtrim(p_partition_key, ' ')
         AND (SELECT t.typcategory FROM pg_catalog.pg_type t WHERE t.oid = pg_catalog.to_regtype(v_q.partition_type)) = 'S' THEN
        PERFORM outbox._invalid(p_function, pg_catalog.format(
          'partition_key must fit column %s (%s) of %s, got %s characters', v_q.partition_column,
          v_q.partition_type, v_q.queue, pg_catalog.length(p_partition_key)));
      END IF;
    END IF;
    v_key_column := pg_catalog.format(', %I', v_q.partition_column);
    v_key_value := pg_catalog.format(', $6::%s', v_q.partition_type);
  END IF;
  RETURN QUERY EXECUTE pg_catalog.format(
    'INSERT INTO %s AS t (event_type, payload, next_attempt_at, headers, event_id%s)
     VALUES ($1, $2, $3, $4, COALESCE($5, pg_catalog.gen_random_uuid())%s)
     RETURNING t.id, t.event_id',
    v_q.table_oid::regclass, v_key_column, v_key_value)
    USING p_event_type, p_payload, p_deliver_at, p_headers, p_event_id, p_partition_key;
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
  SELECT '0.1.0'::text, 46;
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
