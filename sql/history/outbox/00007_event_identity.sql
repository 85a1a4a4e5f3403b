-- +goose Up
-- +goose StatementBegin
-- The event's stable identity, headers and a caller-chosen retry time (issue 15; DESIGN "Identity
-- and order of an event"). Functions whose arguments or results change are dropped first: a new
-- signature beside the old one would make every call with the old arguments ambiguous.
DROP FUNCTION outbox.enqueue(text, text, jsonb, text);
DROP FUNCTION outbox.claim_batch(text, integer, interval);
DROP FUNCTION outbox.claim_locked(text, integer);
DROP FUNCTION outbox.apply_result(text, bigint, uuid, text, text);
DROP FUNCTION outbox.apply_results(text, bigint[], uuid[], text[], text[]);
DROP FUNCTION outbox.settle_locked(text, bigint[], text[], text[]);
DROP FUNCTION outbox._record(outbox.queues, bigint[], uuid[], text[], text[]);
-- +goose StatementEnd

-- +goose StatementBegin
-- Gives a queue table its event_id column (the event's stable identity, DESIGN "Identity and order
-- of an event") when it has none: nullable and with a default for new rows, so adding it is a
-- catalog change, not a rewrite of a large table under an exclusive lock. Rows written before have
-- NULL, and the claims hand out a uuid derived from the queue and id instead (outbox._event_id_of).
-- An existing column of another type is refused.
CREATE OR REPLACE FUNCTION outbox._add_event_id(p_rel regclass)
RETURNS void
LANGUAGE plpgsql
VOLATILE
SET search_path = ''
AS $$
DECLARE
  v_type text;
  v_default text;
BEGIN
  SELECT pg_catalog.format_type(a.atttypid, a.atttypmod), pg_catalog.pg_get_expr(d.adbin, d.adrelid)
    INTO v_type, v_default
  FROM pg_catalog.pg_attribute a
  LEFT JOIN pg_catalog.pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
  WHERE a.attrelid = p_rel AND a.attname = 'event_id' AND NOT a.attisdropped;
  IF NOT FOUND THEN
    EXECUTE pg_catalog.format('ALTER TABLE %s ADD COLUMN event_id uuid', p_rel);
  ELSIF v_type <> 'uuid' THEN
    PERFORM outbox._invalid('create_queue', pg_catalog.format(
      'queue table %s has an event_id column of type %s; pgdrain needs uuid (the event''s stable identity)', p_rel, v_type));
  END IF;
  IF v_default IS NULL THEN
    EXECUTE pg_catalog.format('ALTER TABLE %s ALTER COLUMN event_id SET DEFAULT pg_catalog.gen_random_uuid()', p_rel);
  END IF;
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- Validates the retry_at argument of apply_result(s) and settle_locked: a caller-chosen time for a
-- row's next attempt (a peer's Retry-After), given only with the outcome 'transient', finite. NULL
-- (the whole array, or one element) keeps the queue's exponential backoff.
CREATE OR REPLACE FUNCTION outbox._check_retry_at(p_function text, p_ids bigint[], p_outcomes text[],
                                                  p_retry_at timestamptz[])
RETURNS void
LANGUAGE plpgsql
IMMUTABLE
SET search_path = ''
AS $$
DECLARE
  v_bad integer;
BEGIN
  IF p_retry_at IS NULL THEN
    RETURN;
  END IF;
  PERFORM outbox._check_one_dimension(p_function, 'retry_at', pg_catalog.array_ndims(p_retry_at));
  IF pg_catalog.cardinality(p_retry_at) <> pg_catalog.cardinality(p_ids) THEN
    PERFORM outbox._invalid(p_function, pg_catalog.format(
      'retry_at must be NULL or have as many elements as ids (%s), got %s',
      pg_catalog.cardinality(p_ids), pg_catalog.cardinality(p_retry_at)));
  END IF;
  SELECT u.n INTO v_bad FROM unnest(p_retry_at, p_outcomes) WITH ORDINALITY AS u(at, outcome, n)
  WHERE u.at IS NOT NULL AND u.outcome IS DISTINCT FROM 'transient' LIMIT 1;
  IF FOUND THEN
    PERFORM outbox._invalid(p_function, pg_catalog.format(
      'retry_at must be NULL unless the outcome is ''transient'' (element %s)', v_bad));
  END IF;
  SELECT u.n INTO v_bad FROM unnest(p_retry_at) WITH ORDINALITY AS u(at, n)
  WHERE u.at IN ('infinity', '-infinity') LIMIT 1;
  IF FOUND THEN
    PERFORM outbox._invalid(p_function, pg_catalog.format(
      'retry_at must be a finite time (element %s)', v_bad));
  END IF;
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- The insert behind enqueue and enqueue_event (p_function names the caller in errors): validates
-- the event and inserts it, returning its id (provisional until COMMIT on a partitioned queue, see
-- DESIGN "Identity and order of an event") and its event_id. deliver_at delays the first attempt
-- (it is the row's next_attempt_at; on a partitioned queue it holds back the key's later events
-- too, which keep their order). headers (an object of strings) travel with the event to the sink.
CREATE OR REPLACE FUNCTION outbox._enqueue(p_function text, p_queue text, p_event_type text, p_payload jsonb,
                                           p_partition_key text, p_deliver_at timestamptz, p_headers jsonb,
                                           p_event_id uuid)
RETURNS TABLE(id bigint, event_id uuid)
LANGUAGE plpgsql
VOLATILE
SET search_path = ''
AS $$
DECLARE
  v_q outbox.queues := outbox._queue(p_function, p_queue);
  v_key_column text := '';
  v_key_value text := '';
BEGIN
  IF p_event_type IS NULL OR pg_catalog.btrim(p_event_type) = '' THEN
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
-- The SQL expression, over a queue table aliased t, of a row's event_id: the column, or for a row
-- written before its table had the column (adopted, or registered before migration 00007) a uuid
-- derived from the queue and the row's id, the same on every claim.
CREATE OR REPLACE FUNCTION outbox._event_id_of(p_q outbox.queues)
RETURNS text
LANGUAGE sql
IMMUTABLE
SET search_path = ''
AS $$
  SELECT pg_catalog.format('COALESCE(t.event_id, pg_catalog.md5(%L || t.id::text)::uuid)', p_q.queue || '/');
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- enqueue, returning the event's stable identity with its id: the event_id every sink and peer
-- dedupes on (the id may change at COMMIT on a partitioned queue; the event_id never does).
CREATE OR REPLACE FUNCTION outbox.enqueue_event(queue text, event_type text, payload jsonb,
                                                partition_key text DEFAULT NULL, deliver_at timestamptz DEFAULT NULL,
                                                headers jsonb DEFAULT NULL, event_id uuid DEFAULT NULL)
RETURNS TABLE(id bigint, event_id uuid)
LANGUAGE sql
VOLATILE
SET search_path = ''
AS $$
  SELECT e.id, e.event_id
  FROM outbox._enqueue('enqueue_event', queue, event_type, payload, partition_key, deliver_at, headers, event_id) e;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- What a queue table enforces on its writers, (re)applied by create_queue and by migration 00004 to
-- queues registered before it. Idempotent.
--  * CHECK constraints that name their rule: pgdrain_attempt_count_not_negative,
--    pgdrain_payload_not_json_null, pgdrain_headers_string_object (headers: NULL or an object of
--    strings) and, for a string partition column, pgdrain_partition_key_not_empty
--    (not empty or blank): a plain INSERT is held to the rules enqueue checks.
--    On an adopted table (p_adopted) they are NOT VALID (no scan of the history), and one that a
--    pending row already breaks is left out with a WARNING: a CHECK is tested on every UPDATE, so it
--    would make that row's claim fail forever. Pending rows are read once, through the claim index.
--  * pgdrain_producer (when the role exists) may INSERT only the event's columns (every column but
--    the ones that steer delivery: id, attempt_count, next_attempt_at, sent_at, leased_until,
--    lease_token, last_error), SELECT (id, event_id) for RETURNING, and use the id's sequence.
--  * The AFTER TRUNCATE trigger pgdrain_truncate (outbox.tg_queue__truncate).
CREATE OR REPLACE FUNCTION outbox._guard_queue_table(p_rel regclass, p_partition_column text,
                                                     p_adopted boolean)
RETURNS void
LANGUAGE plpgsql
VOLATILE
SET search_path = ''
AS $$
DECLARE
  v_check record;
  v_broken boolean;
  v_columns text;
  v_sequence text;
BEGIN
  FOR v_check IN
    SELECT c.name, c.expr
    FROM (VALUES ('pgdrain_attempt_count_not_negative', 'attempt_count >= 0'),
                 ('pgdrain_payload_not_json_null', 'pg_catalog.jsonb_typeof(payload) <> ''null'''),
                 ('pgdrain_headers_string_object', 'headers IS NULL OR pg_catalog.jsonb_typeof(headers) = ''object'' '
                   || 'AND NOT pg_catalog.jsonb_path_exists(headers, ''$.* ? (@.type() != "string")'')')) AS c(name, expr)
    UNION ALL
    SELECT 'pgdrain_partition_key_not_empty', pg_catalog.format('pg_catalog.btrim(%I::text) <> ''''', p_partition_column)
    FROM pg_catalog.pg_attribute a JOIN pg_catalog.pg_type t ON t.oid = a.atttypid
    WHERE a.attrelid = p_rel AND a.attname = p_partition_column AND NOT a.attisdropped
      AND t.typcategory = 'S'
  LOOP
    CONTINUE WHEN EXISTS (SELECT 1 FROM pg_catalog.pg_constraint k
                          WHERE k.conrelid = p_rel AND k.conname = v_check.name);
    IF p_adopted THEN
      EXECUTE pg_catalog.format('SELECT EXISTS (SELECT 1 FROM %s WHERE sent_at IS NULL AND NOT (%s))',
                                p_rel, v_check.expr) INTO STRICT v_broken;
      IF v_broken THEN
        RAISE WARNING 'pgdrain: % not added to %: pending rows break it (it would make their claim fail); run create_queue again once they are delivered',
          v_check.name, p_rel;
        CONTINUE;
      END IF;
    END IF;
    EXECUTE pg_catalog.format('ALTER TABLE %s ADD CONSTRAINT %I CHECK (%s)%s', p_rel, v_check.name,
                              v_check.expr, CASE WHEN p_adopted THEN ' NOT VALID' ELSE '' END);
  END LOOP;

  IF EXISTS (SELECT 1 FROM pg_catalog.pg_roles r WHERE r.rolname = 'pgdrain_producer') THEN
    SELECT pg_catalog.string_agg(pg_catalog.quote_ident(a.attname), ', ' ORDER BY a.attnum) INTO v_columns
    FROM pg_catalog.pg_attribute a
    WHERE a.attrelid = p_rel AND a.attnum > 0 AND NOT a.attisdropped AND a.attgenerated = ''
      AND a.attname NOT IN ('id', 'attempt_count', 'next_attempt_at', 'sent_at', 'leased_until',
                            'lease_token', 'last_error');
    -- Revoking the table-level privilege also revokes every column-level one.
    EXECUTE pg_catalog.format('REVOKE INSERT ON %s FROM pgdrain_producer', p_rel);
    EXECUTE pg_catalog.format('GRANT INSERT (%s), SELECT (id, event_id) ON %s TO pgdrain_producer', v_columns, p_rel);
    v_sequence := COALESCE(outbox._id_sequence(p_rel)::text,
                           pg_catalog.pg_get_serial_sequence(p_rel::text, 'id'));
    IF v_sequence IS NOT NULL THEN
      EXECUTE pg_catalog.format('GRANT USAGE ON SEQUENCE %s TO pgdrain_producer', v_sequence);
    END IF;
  END IF;

  EXECUTE pg_catalog.format('DROP TRIGGER IF EXISTS pgdrain_truncate ON %s', p_rel);
  EXECUTE pg_catalog.format(
    'CREATE TRIGGER pgdrain_truncate AFTER TRUNCATE ON %s FOR EACH STATEMENT
       EXECUTE FUNCTION outbox.tg_queue__truncate()', p_rel);
END;
$$;
-- +goose StatementEnd

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
-- not a deadline: it stays now(), the time of the transaction that made the row sent.
-- p_retry_at (NULL, or aligned with p_ids; NULL elements = backoff) sets a transient row's next
-- attempt to a time the caller chose (a peer's Retry-After), never earlier than the clock.
CREATE OR REPLACE FUNCTION outbox._record(p_q outbox.queues, p_ids bigint[], p_tokens uuid[],
                                          p_outcomes text[], p_errors text[], p_retry_at timestamptz[])
RETURNS bigint[]
LANGUAGE plpgsql
VOLATILE
SET search_path = ''
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
  EXECUTE pg_catalog.format(
    'WITH input AS (
       SELECT u.id, u.token, u.outcome, u.err, u.retry_at
       FROM unnest($1::bigint[], $2::uuid[], $3::text[], $4::text[], $11::timestamptz[])
         AS u(id, token, outcome, err, retry_at)),
     decided AS (
       SELECT i.*, CASE
                WHEN i.outcome = ''sent'' THEN NULL
                WHEN i.outcome = ''permanent'' AND $5 = ''poison'' THEN $6
                -- Never fewer attempts than the row has: a row poisoned by a lowered max_attempts
                -- while it was leased stays poisoned.
                ELSE GREATEST(t.attempt_count, LEAST(t.attempt_count + 1, $7)) END AS attempts
       FROM input i JOIN %1$s t ON t.id = i.id),
     upd AS (
       UPDATE %1$s t SET
         sent_at = CASE WHEN d.outcome = ''sent'' THEN pg_catalog.now() END,
         attempt_count = COALESCE(d.attempts, t.attempt_count),
         next_attempt_at = CASE
           WHEN d.outcome = ''sent'' THEN t.next_attempt_at
           WHEN d.attempts >= $6 THEN NULL
           WHEN d.retry_at IS NOT NULL THEN GREATEST(d.retry_at, $10)
           ELSE $10 + outbox._backoff(d.attempts, $8, $9) END,
         last_error = CASE WHEN d.outcome = ''sent'' THEN t.last_error ELSE d.err END,
         leased_until = NULL,
         lease_token = NULL
       FROM decided d
       WHERE t.id = d.id AND t.sent_at IS NULL AND ($2 IS NULL OR t.lease_token = d.token)
       RETURNING t.id, %2$s AS key)
     SELECT pg_catalog.array_agg(upd.id), pg_catalog.array_agg(DISTINCT upd.key) FROM upd',
    p_q.table_oid::regclass,
    CASE WHEN p_q.partition_column IS NULL THEN 'NULL::text'
         ELSE pg_catalog.format('t.%I::text', p_q.partition_column) END)
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
-- Records 'sent', 'transient' or 'permanent' for one leased row, only while lease_token still
-- matches. false = the lease is no longer ours (expired and re-claimed, released, or already
-- recorded): then nothing in the row changed. retry_at, with 'transient' only, is when the next
-- attempt may start (a peer's Retry-After) instead of the queue's backoff.
CREATE OR REPLACE FUNCTION outbox.apply_result(queue text, id bigint, lease_token uuid, outcome text,
                                               error text DEFAULT NULL, retry_at timestamptz DEFAULT NULL)
RETURNS boolean
LANGUAGE plpgsql
VOLATILE
SET search_path = ''
AS $$
DECLARE
  fn constant text := 'apply_result';
  v_q outbox.queues := outbox._queue(fn, queue);
BEGIN
  IF apply_result.id IS NULL THEN
    PERFORM outbox._invalid(fn, 'id must not be NULL');
  END IF;
  IF apply_result.lease_token IS NULL THEN
    PERFORM outbox._invalid(fn, 'lease_token must not be NULL');
  END IF;
  PERFORM outbox._check_outcomes(fn, ARRAY[apply_result.id], ARRAY[outcome], ARRAY[error]);
  PERFORM outbox._check_retry_at(fn, ARRAY[apply_result.id], ARRAY[outcome], ARRAY[retry_at]);
  RETURN pg_catalog.cardinality(outbox._record(v_q, ARRAY[apply_result.id], ARRAY[apply_result.lease_token],
                                               ARRAY[outcome], ARRAY[error], ARRAY[retry_at])) = 1;
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- apply_result for a whole batch in one round trip: one row (id, applied) per input id, in input
-- order. Rows whose token no longer matches are reported applied = false and left unchanged.
CREATE OR REPLACE FUNCTION outbox.apply_results(queue text, ids bigint[], lease_tokens uuid[], outcomes text[],
                                                errors text[] DEFAULT NULL, retry_at timestamptz[] DEFAULT NULL)
RETURNS TABLE(id bigint, applied boolean)
LANGUAGE plpgsql
VOLATILE
SET search_path = ''
AS $$
DECLARE
  fn constant text := 'apply_results';
  v_q outbox.queues := outbox._queue(fn, queue);
  v_done bigint[];
BEGIN
  PERFORM outbox._check_outcomes(fn, ids, outcomes, errors);
  PERFORM outbox._check_retry_at(fn, ids, outcomes, retry_at);
  PERFORM outbox._check_one_dimension(fn, 'lease_tokens', pg_catalog.array_ndims(lease_tokens));
  IF lease_tokens IS NULL OR pg_catalog.cardinality(lease_tokens) <> pg_catalog.cardinality(ids) THEN
    PERFORM outbox._invalid(fn, pg_catalog.format(
      'lease_tokens must have as many elements as ids (%s), got %s', pg_catalog.cardinality(ids),
      COALESCE(pg_catalog.cardinality(lease_tokens)::text, 'NULL')));
  END IF;
  IF pg_catalog.array_position(lease_tokens, NULL) IS NOT NULL THEN
    PERFORM outbox._invalid(fn, 'lease_tokens must not contain NULL');
  END IF;
  IF pg_catalog.cardinality(ids) = 0 THEN
    RETURN;
  END IF;
  v_done := outbox._record(v_q, ids, lease_tokens, outcomes,
                           COALESCE(errors, pg_catalog.array_fill(NULL::text, ARRAY[pg_catalog.cardinality(ids)])),
                           retry_at);
  RETURN QUERY SELECT u.id, u.id = ANY (v_done) FROM pg_catalog.unnest(ids) WITH ORDINALITY AS u(id, ord) ORDER BY u.ord;
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- Lease mode: leases up to batch_size deliverable rows for `lease`, each with its own fresh
-- lease_token, in one short transaction. Results come back through apply_result(s) and count only
-- while the token still matches. Order: attempt_count, id (fresh rows overtake retried ones).
-- Due times and leases are read from the clock at the claim, not now(): in a transaction that
-- began long ago now() would hand out a lease that is already over.
CREATE OR REPLACE FUNCTION outbox.claim_batch(queue text, batch_size integer DEFAULT 32, lease interval DEFAULT '30 seconds')
RETURNS TABLE(id bigint, event_type text, payload jsonb, partition_key text, attempt_count integer,
              lease_token uuid, leased_until timestamptz, created_at timestamptz, event_id uuid, headers jsonb)
LANGUAGE plpgsql
VOLATILE
SET search_path = ''
SET enable_seqscan = off
SET enable_sort = off
SET jit = off
AS $$
DECLARE
  fn constant text := 'claim_batch';
  v_q outbox.queues := outbox._queue(fn, queue);
  v_ids bigint[];
  v_clock timestamptz;
BEGIN
  PERFORM outbox._check_batch_size(fn, batch_size);
  PERFORM outbox._check_lease(fn, lease);
  IF v_q.partition_column IS NULL THEN
    -- One statement: pick, lease and return (each EXECUTE is planned anew, so fewer is faster).
    -- One clock reading for the whole statement: a row is due and leased at the same instant.
    v_clock := pg_catalog.clock_timestamp();
    RETURN QUERY EXECUTE pg_catalog.format(
      'WITH leased AS (
         UPDATE %1$s t SET lease_token = pg_catalog.gen_random_uuid(), leased_until = $4 + $3
         WHERE t.id = ANY (ARRAY(
           SELECT s.id FROM %1$s s
           WHERE s.sent_at IS NULL AND s.attempt_count < $2
             AND (s.next_attempt_at IS NULL OR s.next_attempt_at <= $4)
             AND (s.leased_until IS NULL OR s.leased_until <= $4)
           ORDER BY s.attempt_count, s.id LIMIT $1
           FOR UPDATE SKIP LOCKED))
         RETURNING t.id, t.event_type, t.payload, NULL::text, t.attempt_count, t.lease_token, t.leased_until,
                   t.created_at, %2$s, t.headers)
       SELECT * FROM leased ORDER BY 5, 1', v_q.table_oid::regclass, outbox._event_id_of(v_q))
      USING batch_size, v_q.max_attempts, lease, v_clock;
    RETURN;
  END IF;
  v_ids := outbox._claim(v_q, batch_size, lease, 'lease');
  IF pg_catalog.cardinality(v_ids) = 0 THEN
    -- id = ANY('{}') is constant false, which "implies" any partial index's predicate: the planner
    -- would then walk the claim index end to end to return nothing.
    RETURN;
  END IF;
  RETURN QUERY EXECUTE pg_catalog.format(
    'SELECT t.id, t.event_type, t.payload, %s, t.attempt_count, t.lease_token, t.leased_until, t.created_at,
            %s, t.headers
     FROM %s t WHERE t.id = ANY ($1) ORDER BY t.attempt_count, t.id',
    CASE WHEN v_q.partition_column IS NULL THEN 'NULL::text'
         ELSE pg_catalog.format('t.%I::text', v_q.partition_column) END,
    outbox._event_id_of(v_q), v_q.table_oid::regclass)
    USING v_ids;
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- Lock mode (seed 001's claim transaction): the same deliverable rows as claim_batch, locked
-- FOR UPDATE SKIP LOCKED by the caller's open transaction until it ends. No lease is written: the
-- row lock is the fence, and settle_locked records outcomes in the same transaction, so each row
-- is written once. The claimed ids are remembered in a transaction-local setting for settle_locked.
CREATE OR REPLACE FUNCTION outbox.claim_locked(queue text, batch_size integer DEFAULT 32)
RETURNS TABLE(id bigint, event_type text, payload jsonb, partition_key text, attempt_count integer,
              created_at timestamptz, event_id uuid, headers jsonb)
LANGUAGE plpgsql
VOLATILE
SET search_path = ''
AS $$
DECLARE
  fn constant text := 'claim_locked';
  v_q outbox.queues := outbox._queue(fn, queue);
  v_ids bigint[];
  v_setting text;
BEGIN
  PERFORM outbox._check_batch_size(fn, batch_size);
  -- _claim leaves out the rows this transaction already holds (SKIP LOCKED does not skip our own
  -- locks), so a row is never handed out twice.
  v_ids := outbox._claim(v_q, batch_size, NULL, 'lock');
  v_setting := 'pgdrain.held_' || v_q.queue_id;
  IF pg_catalog.cardinality(v_ids) = 0 THEN
    RETURN;  -- not even a query: id = ANY('{}') would let the planner pick any partial index
  END IF;
  PERFORM pg_catalog.set_config(v_setting,
    pg_catalog.concat_ws(',', NULLIF(pg_catalog.current_setting(v_setting, true), ''),
                         pg_catalog.array_to_string(v_ids, ',')), true);
  RETURN QUERY EXECUTE pg_catalog.format(
    'SELECT t.id, t.event_type, t.payload, %s, t.attempt_count, t.created_at, %s, t.headers
     FROM %s t WHERE t.id = ANY ($1) ORDER BY t.attempt_count, t.id',
    CASE WHEN v_q.partition_column IS NULL THEN 'NULL::text'
         ELSE pg_catalog.format('t.%I::text', v_q.partition_column) END,
    outbox._event_id_of(v_q), v_q.table_oid::regclass)
    USING v_ids;
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- Creates (or adopts) the queue table, exactly the two required partial indexes, the NOTIFY trigger,
-- the TRUNCATE trigger and, for a partitioned queue, the trigger that feeds the commit step; then
-- registers the queue. Idempotent: calling it again with new settings updates them; the partition
-- column can not change. An adopted table keeps its rows; missing lease columns are added as
-- NULL = "free". What the table enforces on producers (CHECKs, column privileges) is
-- outbox._guard_queue_table.
-- Registration follows the table: when the registered table was dropped (or dropped and made
-- again) outside drop_queue, the new table is registered under the same queue_id and every piece
-- of state derived from the old one (partition heads, built-mark, clocks) is dropped first; heads
-- are then rebuilt from the new table's rows.
-- A partitioned queue needs the sequence its ids come from (outbox.queues.id_sequence): the commit
-- step renumbers late rows with it.
-- A created table gets fillfactor 80, so writing a lease is a HOT update (no index touched), and
-- autovacuum settings for a table that is mostly empty and churns.
CREATE OR REPLACE FUNCTION outbox.create_queue(
  queue text,
  partition_column text DEFAULT NULL,
  max_attempts integer DEFAULT 10,
  backoff_min interval DEFAULT '1 second',
  backoff_max interval DEFAULT '30 seconds',
  permanent_policy text DEFAULT 'poison',
  channel text DEFAULT NULL)
RETURNS void
LANGUAGE plpgsql
VOLATILE
SET search_path = ''
SET client_min_messages = warning
AS $$
DECLARE
  fn constant text := 'create_queue';
  v_name text := outbox._queue_name(fn, queue);
  v_schema text := pg_catalog.split_part(v_name, '.', 1);
  v_table text := pg_catalog.split_part(v_name, '.', 2);
  v_col text := pg_catalog.lower(partition_column);
  v_channel text := COALESCE(channel, 'pgdrain_' || v_schema || '_' || v_table);
  v_rel regclass;
  v_old outbox.queues;
  v_type text;
  v_queue_id integer;
  v_missing text;
  v_has_nulls boolean;
  v_sequence regclass;
  v_other text;
  v_new_table boolean;
  v_created boolean := false;
BEGIN
  IF partition_column IS NOT NULL AND partition_column !~ '^[A-Za-z_][A-Za-z0-9_]{0,62}$' THEN
    PERFORM outbox._invalid(fn, pg_catalog.format(
      'partition_column must be a plain column name, got %L', partition_column));
  END IF;
  IF v_col IN ('id', 'event_type', 'payload', 'created_at', 'attempt_count', 'next_attempt_at',
               'sent_at', 'leased_until', 'lease_token', 'last_error') THEN
    PERFORM outbox._invalid(fn, pg_catalog.format(
      'partition_column must not be one of the queue''s own columns, got %L', partition_column));
  END IF;
  IF max_attempts IS NULL OR max_attempts < 1 OR max_attempts > 1000 THEN
    PERFORM outbox._invalid(fn, pg_catalog.format(
      'max_attempts must be between 1 and 1000, got %s', COALESCE(max_attempts::text, 'NULL')));
  END IF;
  IF backoff_min IS NULL OR backoff_min <= interval '0' THEN
    PERFORM outbox._invalid(fn, pg_catalog.format(
      'backoff_min must be greater than 0, got %s', COALESCE(backoff_min::text, 'NULL')));
  END IF;
  IF backoff_max IS NULL OR backoff_max < backoff_min OR backoff_max > interval '1 day' THEN
    PERFORM outbox._invalid(fn, pg_catalog.format(
      'backoff_max must be between backoff_min (%s) and 1 day, got %s',
      backoff_min, COALESCE(backoff_max::text, 'NULL')));
  END IF;
  IF permanent_policy IS NULL OR permanent_policy NOT IN ('poison', 'retry') THEN
    PERFORM outbox._invalid(fn, pg_catalog.format(
      'permanent_policy must be ''poison'' or ''retry'', got %L', permanent_policy));
  END IF;
  IF permanent_policy = 'retry' AND v_col IS NOT NULL THEN
    PERFORM outbox._invalid(fn,
      'permanent_policy ''retry'' is not allowed with a partition_column: an event that can never '
      'apply would wedge its partition forever');
  END IF;
  IF v_channel !~ '^[A-Za-z_][A-Za-z0-9_]{0,62}$' THEN
    PERFORM outbox._invalid(fn, pg_catalog.format(
      'channel must be a plain name of at most 63 characters, got %L', v_channel));
  END IF;
  v_channel := pg_catalog.lower(v_channel);

  IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_namespace n WHERE n.nspname = v_schema) THEN
    RAISE EXCEPTION '%: schema % does not exist', fn, v_schema USING ERRCODE = '3F000';
  END IF;
  v_rel := pg_catalog.to_regclass(pg_catalog.format('%I.%I', v_schema, v_table));

  -- The registration is this table's only while its oid is the table's; a registration whose
  -- table was dropped (and maybe made again) is stale, and the new table is a new queue.
  SELECT * INTO v_old FROM outbox.queues q WHERE q.queue = v_name FOR UPDATE;
  IF FOUND AND v_old.table_oid = v_rel AND v_old.partition_column IS DISTINCT FROM v_col THEN
    PERFORM outbox._invalid(fn, pg_catalog.format(
      'partition_column of registered queue %s is %s and can not change to %s (drop_queue first)',
      v_name, COALESCE(v_old.partition_column, 'NULL'), COALESCE(v_col, 'NULL')));
  END IF;
  IF v_rel IS NOT NULL THEN
    SELECT q.queue INTO v_other FROM outbox.queues q WHERE q.table_oid = v_rel AND q.queue <> v_name;
    IF v_other IS NOT NULL THEN
      PERFORM outbox._invalid(fn, pg_catalog.format(
        'table %s is already registered as queue %s (renamed?); drop_queue(%L) first', v_name, v_other, v_other));
    END IF;
  END IF;
  v_new_table := v_old.queue_id IS NULL OR v_old.table_oid IS DISTINCT FROM v_rel;

  IF v_rel IS NULL THEN
    EXECUTE pg_catalog.format(
      'CREATE TABLE %I.%I (
         id bigint GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY,
         event_type text NOT NULL,
         payload jsonb NOT NULL,
         created_at timestamptz NOT NULL DEFAULT pg_catalog.now(),
         attempt_count integer NOT NULL DEFAULT 0,
         next_attempt_at timestamptz,
         sent_at timestamptz,
         leased_until timestamptz,
         lease_token uuid,
         last_error text,
         event_id uuid NOT NULL DEFAULT pg_catalog.gen_random_uuid(),
         headers jsonb%s
       ) WITH (fillfactor = 80, autovacuum_vacuum_scale_factor = 0.01, autovacuum_analyze_scale_factor = 0.01,
               autovacuum_vacuum_insert_scale_factor = 0.01)',
      v_schema, v_table,
      CASE WHEN v_col IS NULL THEN '' ELSE pg_catalog.format(', %I text NOT NULL', v_col) END);
    v_rel := pg_catalog.format('%I.%I', v_schema, v_table)::regclass;
    v_created := true;
  ELSE
    IF (SELECT c.relkind FROM pg_catalog.pg_class c WHERE c.oid = v_rel) NOT IN ('r', 'p') THEN
      PERFORM outbox._invalid(fn, pg_catalog.format('queue %s exists but is not a table', v_name));
    END IF;
    -- Adopt: the columns the application already writes must be there with the right types.
    SELECT pg_catalog.string_agg(pg_catalog.format('%s %s', r.col, r.typ), ', ') INTO v_missing
    FROM (VALUES ('id', 'bigint'), ('event_type', 'text'), ('payload', 'jsonb'),
                 ('created_at', 'timestamp with time zone')) AS r(col, typ)
    WHERE NOT EXISTS (
      SELECT 1 FROM pg_catalog.pg_attribute a
      WHERE a.attrelid = v_rel AND a.attname = r.col AND NOT a.attisdropped
        AND pg_catalog.format_type(a.atttypid, a.atttypmod) = r.typ);
    IF v_missing IS NOT NULL THEN
      PERFORM outbox._invalid(fn, pg_catalog.format(
        'queue %s exists but lacks required columns (or has other types): %s', v_name, v_missing));
    END IF;
    IF NOT EXISTS (
      SELECT 1 FROM pg_catalog.pg_index i
      WHERE i.indrelid = v_rel AND i.indisprimary AND i.indnatts = 1
        AND i.indkey[0] = (SELECT a.attnum FROM pg_catalog.pg_attribute a
                           WHERE a.attrelid = v_rel AND a.attname = 'id')) THEN
      PERFORM outbox._invalid(fn, pg_catalog.format('queue %s exists but id is not its primary key', v_name));
    END IF;
    -- NULL in the new columns means "free / never tried", exactly the state of a fresh row.
    EXECUTE pg_catalog.format(
      'ALTER TABLE %s
         ADD COLUMN IF NOT EXISTS attempt_count integer NOT NULL DEFAULT 0,
         ADD COLUMN IF NOT EXISTS next_attempt_at timestamptz,
         ADD COLUMN IF NOT EXISTS sent_at timestamptz,
         ADD COLUMN IF NOT EXISTS leased_until timestamptz,
         ADD COLUMN IF NOT EXISTS lease_token uuid,
         ADD COLUMN IF NOT EXISTS last_error text,
         ADD COLUMN IF NOT EXISTS headers jsonb', v_rel);
    PERFORM outbox._add_event_id(v_rel);
    IF v_col IS NOT NULL THEN
      IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_attribute a
                     WHERE a.attrelid = v_rel AND a.attname = v_col AND NOT a.attisdropped) THEN
        PERFORM outbox._invalid(fn, pg_catalog.format(
          'partition_column %s does not exist in %s', v_col, v_name));
      END IF;
      -- A NULL key would make a row independent of its partition and silently lose order.
      EXECUTE pg_catalog.format('SELECT EXISTS (SELECT 1 FROM %s WHERE %I IS NULL)', v_rel, v_col)
        INTO STRICT v_has_nulls;
      IF v_has_nulls THEN
        PERFORM outbox._invalid(fn, pg_catalog.format(
          'partition_column %s of %s has NULL values; fill them before adopting the table', v_col, v_name));
      END IF;
      EXECUTE pg_catalog.format('ALTER TABLE %s ALTER COLUMN %I SET NOT NULL', v_rel, v_col);
    END IF;
  END IF;

  IF v_col IS NOT NULL THEN
    SELECT pg_catalog.format_type(a.atttypid, a.atttypmod) INTO v_type
    FROM pg_catalog.pg_attribute a WHERE a.attrelid = v_rel AND a.attname = v_col;
  END IF;

  -- Renumbering late rows at commit (per-key commit order) takes new ids from this sequence.
  v_sequence := outbox._id_sequence(v_rel);
  IF v_col IS NOT NULL AND v_sequence IS NULL THEN
    PERFORM outbox._invalid(fn, pg_catalog.format(
      'queue %s is partitioned, so its id must come from an ascending sequence (identity, serial or '
      'DEFAULT nextval(''a_sequence'')): per-key commit order renumbers late rows with it', v_name));
  END IF;

  -- Everything derived from the old table goes before the new one is registered.
  IF v_old.queue_id IS NOT NULL AND v_new_table THEN
    DELETE FROM outbox.partition_heads h WHERE h.queue_id = v_old.queue_id;
    DELETE FROM outbox.partition_heads_built b WHERE b.queue_id = v_old.queue_id;
    DELETE FROM outbox.partition_clocks c WHERE c.queue_id = v_old.queue_id;
  END IF;

  -- clock_base: every id the sequence gave out so far counts as committed for per-key commit order
  -- (sessions with a cached sequence may still hand out smaller ones; their rows are then late).
  INSERT INTO outbox.queues AS q (queue, table_oid, partition_column, partition_type, max_attempts,
                                  backoff_min, backoff_max, permanent_policy, channel, id_sequence, clock_base)
  VALUES (v_name, v_rel, v_col, v_type, create_queue.max_attempts, create_queue.backoff_min,
          create_queue.backoff_max, create_queue.permanent_policy, v_channel, v_sequence,
          COALESCE(pg_catalog.pg_sequence_last_value(v_sequence), 0))
  ON CONFLICT ON CONSTRAINT queues_queue_key DO UPDATE
    SET max_attempts = EXCLUDED.max_attempts, backoff_min = EXCLUDED.backoff_min,
        backoff_max = EXCLUDED.backoff_max, permanent_policy = EXCLUDED.permanent_policy,
        channel = EXCLUDED.channel, table_oid = EXCLUDED.table_oid,
        partition_column = EXCLUDED.partition_column, partition_type = EXCLUDED.partition_type,
        id_sequence = EXCLUDED.id_sequence,
        clock_base = CASE WHEN q.table_oid = EXCLUDED.table_oid THEN q.clock_base ELSE EXCLUDED.clock_base END
  RETURNING q.queue_id INTO v_queue_id;

  -- The two required indexes, unless an equivalent one (any name) is already there.
  IF v_col IS NOT NULL AND NOT EXISTS (
      SELECT 1 FROM outbox._queue_indexes(v_rel, v_col) x WHERE x.role = 'partition') THEN
    EXECUTE pg_catalog.format('CREATE INDEX %I ON %s (%I, id) WHERE sent_at IS NULL',
                              pg_catalog.left(v_table, 40) || '_pgdrain_partition', v_rel, v_col);
  END IF;
  IF NOT EXISTS (SELECT 1 FROM outbox._queue_indexes(v_rel, v_col) x WHERE x.role = 'claim') THEN
    EXECUTE pg_catalog.format('CREATE INDEX %I ON %s (attempt_count, id) WHERE sent_at IS NULL',
                              pg_catalog.left(v_table, 40) || '_pgdrain_claim', v_rel);
  END IF;

  -- CHECKs, the producers' column privileges (plain INSERT of an event, RETURNING id; the heads
  -- trigger runs as owner) and the TRUNCATE trigger.
  PERFORM outbox._guard_queue_table(v_rel, v_col, NOT v_created);

  EXECUTE pg_catalog.format('DROP TRIGGER IF EXISTS pgdrain_notify ON %s', v_rel);
  EXECUTE pg_catalog.format(
    'CREATE TRIGGER pgdrain_notify AFTER INSERT ON %s FOR EACH STATEMENT
       EXECUTE FUNCTION outbox.tg_queue__notify(%L, %L)', v_rel, v_channel, v_name);
  EXECUTE pg_catalog.format('DROP TRIGGER IF EXISTS pgdrain_heads ON %s', v_rel);
  EXECUTE pg_catalog.format('DROP FUNCTION IF EXISTS outbox.%I()', 'tg_queue__heads_q' || v_queue_id);
  IF v_col IS NOT NULL THEN
    PERFORM outbox._install_heads_trigger(q) FROM outbox.queues q WHERE q.queue_id = v_queue_id;
    -- Rows that were pending before adoption (or in the table that replaced the registered one)
    -- need their partition heads too; a registered table already has them, kept by the triggers.
    -- A larger max_attempts makes rows that were poisoned deliverable again, possibly below their
    -- partitions' floors or in partitions without a head: they are searched from scratch too.
    IF v_new_table OR create_queue.max_attempts > v_old.max_attempts THEN
      PERFORM outbox._rebuild_heads(v_queue_id);
    END IF;
  END IF;
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- Convenience insert; a plain INSERT into the queue table is equally valid (the triggers do the
-- rest). partition_key is required (and must not be empty or blank) on a partitioned queue and
-- refused on an unpartitioned one. The payload must be a JSON value other than null. deliver_at
-- delays the first attempt, headers (an object of strings) travel to the sink, event_id is the
-- event's stable identity (generated when NULL). Returns the id; outbox.enqueue_event returns the
-- event_id too.
CREATE OR REPLACE FUNCTION outbox.enqueue(queue text, event_type text, payload jsonb, partition_key text DEFAULT NULL,
                                          deliver_at timestamptz DEFAULT NULL, headers jsonb DEFAULT NULL,
                                          event_id uuid DEFAULT NULL)
RETURNS bigint
LANGUAGE sql
VOLATILE
SET search_path = ''
AS $$
  SELECT e.id FROM outbox._enqueue('enqueue', queue, event_type, payload, partition_key, deliver_at, headers, event_id) e;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- Operator: gives poisoned rows (all of them, or the given ids) a fresh start: attempt_count 0,
-- due now, last_error kept for the record. Returns how many rows were requeued.
-- On a partitioned queue a requeued row goes to the TAIL of its key, as if committed now: it gets a
-- new id from the queue's sequence and is delivered after every row of its key committed before
-- the requeue, never before a successor that was already delivered (an old "register" must not
-- come back after the "unregister" that followed it without the operator asking for exactly that;
-- see docs/ordering.md). The rows then go through the producers' commit step (outbox._note_written):
-- order against concurrent producers, heads, NOTIFY. Their event is the same; only the position moves.
CREATE OR REPLACE FUNCTION outbox.requeue_poisoned(queue text, ids bigint[] DEFAULT NULL)
RETURNS bigint
LANGUAGE plpgsql
VOLATILE
SET search_path = ''
AS $$
DECLARE
  fn constant text := 'requeue_poisoned';
  v_q outbox.queues := outbox._queue(fn, queue);
  v_count bigint;
  v_old bigint[];
  v_keys text[];
  v_mins bigint[];
  v_maxs bigint[];
BEGIN
  IF ids IS NOT NULL AND pg_catalog.array_position(ids, NULL) IS NOT NULL THEN
    PERFORM outbox._invalid(fn, 'ids must not contain NULL');
  END IF;
  IF v_q.partition_column IS NULL THEN
    EXECUTE pg_catalog.format(
      'UPDATE %s t SET attempt_count = 0, next_attempt_at = NULL, leased_until = NULL, lease_token = NULL
       WHERE t.sent_at IS NULL AND t.attempt_count >= $1 AND ($2::bigint[] IS NULL OR t.id = ANY ($2))',
      v_q.table_oid::regclass)
      USING v_q.max_attempts, ids;
    GET DIAGNOSTICS v_count = ROW_COUNT;
    IF v_count > 0 THEN
      PERFORM pg_catalog.pg_notify(v_q.channel, v_q.queue);
    END IF;
    RETURN v_count;
  END IF;

  IF v_q.id_sequence IS NULL THEN
    RAISE EXCEPTION '%: queue % has no id sequence to move requeued rows to the tail of their keys (call outbox.create_queue again)',
      fn, v_q.queue USING ERRCODE = '55000';
  END IF;
  EXECUTE pg_catalog.format(
    'SELECT pg_catalog.array_agg(t.id ORDER BY t.id) FROM %s t
     WHERE t.sent_at IS NULL AND t.attempt_count >= $1 AND ($2::bigint[] IS NULL OR t.id = ANY ($2))',
    v_q.table_oid::regclass)
    INTO v_old USING v_q.max_attempts, ids;
  IF v_old IS NULL THEN
    RETURN 0;
  END IF;
  -- New ids in the order of the old ones (generate_series yields in order, nextval runs per row).
  EXECUTE pg_catalog.format(
    'WITH moved AS (
       SELECT o.old_id, n.new_id
       FROM unnest($1::bigint[]) WITH ORDINALITY AS o(old_id, i)
       JOIN (SELECT g.i, pg_catalog.nextval($3) AS new_id FROM pg_catalog.generate_series(1, $4) AS g(i)) n
         ON n.i = o.i),
     upd AS (
       UPDATE %1$s t SET id = m.new_id, attempt_count = 0, next_attempt_at = NULL, leased_until = NULL,
                         lease_token = NULL, event_id = %3$s
       FROM moved m WHERE t.id = m.old_id AND t.sent_at IS NULL AND t.attempt_count >= $2
       RETURNING t.id, t.%2$I::text AS key)
     SELECT pg_catalog.array_agg(k ORDER BY k), pg_catalog.array_agg(lo ORDER BY k), pg_catalog.array_agg(hi ORDER BY k),
            COALESCE(pg_catalog.sum(n), 0)
     FROM (SELECT upd.key AS k, pg_catalog.min(upd.id) AS lo, pg_catalog.max(upd.id) AS hi, pg_catalog.count(*) AS n
           FROM upd GROUP BY 1) s',
    v_q.table_oid::regclass, v_q.partition_column, outbox._event_id_of(v_q))
    INTO v_keys, v_mins, v_maxs, v_count USING v_old, v_q.max_attempts, v_q.id_sequence, pg_catalog.cardinality(v_old);
  IF v_keys IS NULL THEN
    RETURN 0;
  END IF;
  PERFORM outbox._note_written(v_q.queue_id, v_q.table_oid, v_keys, v_mins, v_maxs);
  -- The commit step notifies only for heads it creates or wakes; a requeue is an operator asking
  -- for delivery now, so say so whatever the heads were.
  PERFORM pg_catalog.pg_notify(v_q.channel, v_q.queue);
  RETURN v_count;
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- Lock mode: records outcomes for rows this transaction claimed with claim_locked and still holds.
-- Refuses (SQLSTATE 55000, nothing changed) any id this transaction does not hold: the id must be
-- in claim_locked's list for this transaction and its row lock must be this transaction's, taken at
-- the top level or in a savepoint that is still open or was released (a rolled-back savepoint
-- took its lock, and its part of the list, with it). Returns how many rows were recorded. A
-- settled row leaves the held set, so it is recorded at most once per claim: settling it again is
-- refused like any row not held (else a second 'transient' would count a second attempt).
CREATE OR REPLACE FUNCTION outbox.settle_locked(queue text, ids bigint[], outcomes text[], errors text[] DEFAULT NULL,
                                                retry_at timestamptz[] DEFAULT NULL)
RETURNS bigint
LANGUAGE plpgsql
VOLATILE
SET search_path = ''
AS $$
DECLARE
  fn constant text := 'settle_locked';
  v_q outbox.queues := outbox._queue(fn, queue);
  v_held bigint[];
  v_foreign bigint;
  v_count bigint;
BEGIN
  PERFORM outbox._check_outcomes(fn, ids, outcomes, errors);
  PERFORM outbox._check_retry_at(fn, ids, outcomes, retry_at);
  IF pg_catalog.cardinality(ids) = 0 THEN
    RETURN 0;
  END IF;
  v_held := pg_catalog.string_to_array(
    NULLIF(pg_catalog.current_setting('pgdrain.held_' || v_q.queue_id, true), ''), ',')::bigint[];
  SELECT x INTO v_foreign FROM pg_catalog.unnest(ids) x WHERE x <> ALL (COALESCE(v_held, '{}')) LIMIT 1;
  IF NOT FOUND THEN
    -- The setting is only a list any session could SET LOCAL: the row lock itself must be ours
    -- too (outbox._locked_here: claim_locked's FOR UPDATE, in this transaction or one of its
    -- live savepoints).
    v_foreign := outbox._locked_here(v_q.table_oid::regclass, ids);
  END IF;
  IF v_foreign IS NOT NULL THEN
    RAISE EXCEPTION '%: row % of % is not held by this transaction (claim it with claim_locked in the same transaction)',
      fn, v_foreign, v_q.queue USING ERRCODE = '55000';
  END IF;
  v_count := pg_catalog.cardinality(outbox._record(v_q, ids, NULL, outcomes,
    COALESCE(errors, pg_catalog.array_fill(NULL::text, ARRAY[pg_catalog.cardinality(ids)])), retry_at));
  PERFORM pg_catalog.set_config('pgdrain.held_' || v_q.queue_id,
    COALESCE((SELECT pg_catalog.string_agg(h::text, ',') FROM pg_catalog.unnest(v_held) h WHERE h <> ALL (ids)), ''),
    true);
  RETURN v_count;
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- Every registered queue table gets headers and event_id (nullable, with a default for new rows:
-- no rewrite), then the CHECK on headers and the producers' SELECT (event_id) for RETURNING.
DO $identity$
DECLARE
  q outbox.queues;
BEGIN
  FOR q IN SELECT * FROM outbox.queues x WHERE pg_catalog.pg_table_is_visible(x.table_oid) IS NOT NULL
           ORDER BY x.queue_id LOOP
    EXECUTE pg_catalog.format('ALTER TABLE %s ADD COLUMN IF NOT EXISTS headers jsonb', q.table_oid::regclass);
    PERFORM outbox._add_event_id(q.table_oid::regclass);
    PERFORM outbox._guard_queue_table(q.table_oid::regclass, q.partition_column, true);
  END LOOP;
END;
$identity$;
-- +goose StatementEnd

-- +goose StatementBegin
-- Who may call what in schema outbox (canonical source; migrations 00002 and 00003 carry the same
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
ALTER FUNCTION outbox.enqueue(text, text, jsonb, text, timestamptz, jsonb, uuid) SECURITY DEFINER;
ALTER FUNCTION outbox.enqueue_event(text, text, jsonb, text, timestamptz, jsonb, uuid) SECURITY DEFINER;
ALTER FUNCTION outbox.tg_queue__commit() SECURITY DEFINER;
ALTER FUNCTION outbox.tg_queue__truncate() SECURITY DEFINER;
ALTER FUNCTION outbox.claim_batch(text, integer, interval) SECURITY DEFINER;
ALTER FUNCTION outbox.apply_result(text, bigint, uuid, text, text, timestamptz) SECURITY DEFINER;
ALTER FUNCTION outbox.apply_results(text, bigint[], uuid[], text[], text[], timestamptz[]) SECURITY DEFINER;
ALTER FUNCTION outbox.extend_lease(text, bigint, uuid, interval) SECURITY DEFINER;
ALTER FUNCTION outbox.release(text, bigint, uuid) SECURITY DEFINER;
ALTER FUNCTION outbox.claim_locked(text, integer) SECURITY DEFINER;
ALTER FUNCTION outbox.settle_locked(text, bigint[], text[], text[], timestamptz[]) SECURITY DEFINER;
ALTER FUNCTION outbox.stats(text) SECURITY DEFINER;
ALTER FUNCTION outbox.wedged_partitions(text, interval, integer) SECURITY DEFINER;
ALTER FUNCTION outbox.check_indexes(text) SECURITY DEFINER;
ALTER FUNCTION outbox.requeue_poisoned(text, bigint[]) SECURITY DEFINER;
ALTER FUNCTION outbox.purge_sent(text, interval, integer) SECURITY DEFINER;
ALTER FUNCTION outbox.queue_info(text) SECURITY DEFINER;
ALTER FUNCTION outbox.next_due(text) SECURITY DEFINER;
ALTER FUNCTION outbox.repair(text, boolean) SECURITY DEFINER;

-- Producers: enqueue. A plain INSERT needs INSERT on the event's columns of the queue table, which
-- create_queue grants per table (outbox._guard_queue_table); the heads, commit and truncate triggers
-- run as definer and are executable by nobody.
GRANT EXECUTE ON FUNCTION outbox.enqueue(text, text, jsonb, text, timestamptz, jsonb, uuid) TO pgdrain_producer;
GRANT EXECUTE ON FUNCTION outbox.enqueue_event(text, text, jsonb, text, timestamptz, jsonb, uuid) TO pgdrain_producer;

-- Workers: both claim modes, results, heartbeats, releases.
GRANT EXECUTE ON FUNCTION
  outbox.claim_batch(text, integer, interval),
  outbox.apply_result(text, bigint, uuid, text, text, timestamptz),
  outbox.apply_results(text, bigint[], uuid[], text[], text[], timestamptz[]),
  outbox.extend_lease(text, bigint, uuid, interval),
  outbox.release(text, bigint, uuid),
  outbox.claim_locked(text, integer),
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

-- Workers also read what the Go drainer reports about its queue: the gauges (WithMetrics), wedged
-- partitions (WithWedgeObserver) and the index check at start. All read-only, no payloads.
GRANT EXECUTE ON FUNCTION
  outbox.stats(text),
  outbox.wedged_partitions(text, interval, integer),
  outbox.check_indexes(text)
  TO pgdrain_worker;

-- create_queue and drop_queue stay SECURITY INVOKER and are granted to nobody: they create and
-- alter tables and triggers, which only the owner of the schema (the migrating role) should do.
-- +goose StatementEnd

-- +goose Down
-- +goose StatementBegin
-- Back to 00006: the functions get their old signatures back (below). The event_id and headers
-- columns stay on the queue tables, with their data; 00006's functions do not read them.
DROP FUNCTION outbox.enqueue_event(text, text, jsonb, text, timestamptz, jsonb, uuid);
DROP FUNCTION outbox.enqueue(text, text, jsonb, text, timestamptz, jsonb, uuid);
DROP FUNCTION outbox._enqueue(text, text, text, jsonb, text, timestamptz, jsonb, uuid);
DROP FUNCTION outbox.claim_batch(text, integer, interval);
DROP FUNCTION outbox.claim_locked(text, integer);
DROP FUNCTION outbox.apply_result(text, bigint, uuid, text, text, timestamptz);
DROP FUNCTION outbox.apply_results(text, bigint[], uuid[], text[], text[], timestamptz[]);
DROP FUNCTION outbox.settle_locked(text, bigint[], text[], text[], timestamptz[]);
DROP FUNCTION outbox._record(outbox.queues, bigint[], uuid[], text[], text[], timestamptz[]);
DROP FUNCTION outbox._check_retry_at(text, bigint[], text[], timestamptz[]);
DROP FUNCTION outbox._event_id_of(outbox.queues);
DROP FUNCTION outbox._add_event_id(regclass);
-- +goose StatementEnd

-- +goose StatementBegin
-- What a queue table enforces on its writers, (re)applied by create_queue and by migration 00004 to
-- queues registered before it. Idempotent.
--  * CHECK constraints that name their rule: pgdrain_attempt_count_not_negative,
--    pgdrain_payload_not_json_null and, for a string partition column, pgdrain_partition_key_not_empty
--    (not empty or blank): a plain INSERT is held to the rules enqueue checks.
--    On an adopted table (p_adopted) they are NOT VALID (no scan of the history), and one that a
--    pending row already breaks is left out with a WARNING: a CHECK is tested on every UPDATE, so it
--    would make that row's claim fail forever. Pending rows are read once, through the claim index.
--  * pgdrain_producer (when the role exists) may INSERT only the event's columns (every column but
--    the ones that steer delivery: id, attempt_count, next_attempt_at, sent_at, leased_until,
--    lease_token, last_error), SELECT (id) for RETURNING id, and use the id's sequence.
--  * The AFTER TRUNCATE trigger pgdrain_truncate (outbox.tg_queue__truncate).
CREATE OR REPLACE FUNCTION outbox._guard_queue_table(p_rel regclass, p_partition_column text,
                                                     p_adopted boolean)
RETURNS void
LANGUAGE plpgsql
VOLATILE
SET search_path = ''
AS $$
DECLARE
  v_check record;
  v_broken boolean;
  v_columns text;
  v_sequence text;
BEGIN
  FOR v_check IN
    SELECT c.name, c.expr
    FROM (VALUES ('pgdrain_attempt_count_not_negative', 'attempt_count >= 0'),
                 ('pgdrain_payload_not_json_null', 'pg_catalog.jsonb_typeof(payload) <> ''null''')) AS c(name, expr)
    UNION ALL
    SELECT 'pgdrain_partition_key_not_empty', pg_catalog.format('pg_catalog.btrim(%I::text) <> ''''', p_partition_column)
    FROM pg_catalog.pg_attribute a JOIN pg_catalog.pg_type t ON t.oid = a.atttypid
    WHERE a.attrelid = p_rel AND a.attname = p_partition_column AND NOT a.attisdropped
      AND t.typcategory = 'S'
  LOOP
    CONTINUE WHEN EXISTS (SELECT 1 FROM pg_catalog.pg_constraint k
                          WHERE k.conrelid = p_rel AND k.conname = v_check.name);
    IF p_adopted THEN
      EXECUTE pg_catalog.format('SELECT EXISTS (SELECT 1 FROM %s WHERE sent_at IS NULL AND NOT (%s))',
                                p_rel, v_check.expr) INTO STRICT v_broken;
      IF v_broken THEN
        RAISE WARNING 'pgdrain: % not added to %: pending rows break it (it would make their claim fail); run create_queue again once they are delivered',
          v_check.name, p_rel;
        CONTINUE;
      END IF;
    END IF;
    EXECUTE pg_catalog.format('ALTER TABLE %s ADD CONSTRAINT %I CHECK (%s)%s', p_rel, v_check.name,
                              v_check.expr, CASE WHEN p_adopted THEN ' NOT VALID' ELSE '' END);
  END LOOP;

  IF EXISTS (SELECT 1 FROM pg_catalog.pg_roles r WHERE r.rolname = 'pgdrain_producer') THEN
    SELECT pg_catalog.string_agg(pg_catalog.quote_ident(a.attname), ', ' ORDER BY a.attnum) INTO v_columns
    FROM pg_catalog.pg_attribute a
    WHERE a.attrelid = p_rel AND a.attnum > 0 AND NOT a.attisdropped AND a.attgenerated = ''
      AND a.attname NOT IN ('id', 'attempt_count', 'next_attempt_at', 'sent_at', 'leased_until',
                            'lease_token', 'last_error');
    -- Revoking the table-level privilege also revokes every column-level one.
    EXECUTE pg_catalog.format('REVOKE INSERT ON %s FROM pgdrain_producer', p_rel);
    EXECUTE pg_catalog.format('GRANT INSERT (%s), SELECT (id) ON %s TO pgdrain_producer', v_columns, p_rel);
    v_sequence := COALESCE(outbox._id_sequence(p_rel)::text,
                           pg_catalog.pg_get_serial_sequence(p_rel::text, 'id'));
    IF v_sequence IS NOT NULL THEN
      EXECUTE pg_catalog.format('GRANT USAGE ON SEQUENCE %s TO pgdrain_producer', v_sequence);
    END IF;
  END IF;

  EXECUTE pg_catalog.format('DROP TRIGGER IF EXISTS pgdrain_truncate ON %s', p_rel);
  EXECUTE pg_catalog.format(
    'CREATE TRIGGER pgdrain_truncate AFTER TRUNCATE ON %s FOR EACH STATEMENT
       EXECUTE FUNCTION outbox.tg_queue__truncate()', p_rel);
END;
$$;
-- +goose StatementEnd

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
-- not a deadline: it stays now(), the time of the transaction that made the row sent.
CREATE OR REPLACE FUNCTION outbox._record(p_q outbox.queues, p_ids bigint[], p_tokens uuid[],
                                          p_outcomes text[], p_errors text[])
RETURNS bigint[]
LANGUAGE plpgsql
VOLATILE
SET search_path = ''
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
  EXECUTE pg_catalog.format(
    'WITH input AS (
       SELECT u.id, u.token, u.outcome, u.err
       FROM unnest($1::bigint[], $2::uuid[], $3::text[], $4::text[]) AS u(id, token, outcome, err)),
     decided AS (
       SELECT i.*, CASE
                WHEN i.outcome = ''sent'' THEN NULL
                WHEN i.outcome = ''permanent'' AND $5 = ''poison'' THEN $6
                -- Never fewer attempts than the row has: a row poisoned by a lowered max_attempts
                -- while it was leased stays poisoned.
                ELSE GREATEST(t.attempt_count, LEAST(t.attempt_count + 1, $7)) END AS attempts
       FROM input i JOIN %1$s t ON t.id = i.id),
     upd AS (
       UPDATE %1$s t SET
         sent_at = CASE WHEN d.outcome = ''sent'' THEN pg_catalog.now() END,
         attempt_count = COALESCE(d.attempts, t.attempt_count),
         next_attempt_at = CASE
           WHEN d.outcome = ''sent'' THEN t.next_attempt_at
           WHEN d.attempts >= $6 THEN NULL
           ELSE $10 + outbox._backoff(d.attempts, $8, $9) END,
         last_error = CASE WHEN d.outcome = ''sent'' THEN t.last_error ELSE d.err END,
         leased_until = NULL,
         lease_token = NULL
       FROM decided d
       WHERE t.id = d.id AND t.sent_at IS NULL AND ($2 IS NULL OR t.lease_token = d.token)
       RETURNING t.id, %2$s AS key)
     SELECT pg_catalog.array_agg(upd.id), pg_catalog.array_agg(DISTINCT upd.key) FROM upd',
    p_q.table_oid::regclass,
    CASE WHEN p_q.partition_column IS NULL THEN 'NULL::text'
         ELSE pg_catalog.format('t.%I::text', p_q.partition_column) END)
    INTO v_done, v_keys
    USING p_ids, p_tokens, p_outcomes, p_errors, p_q.permanent_policy, p_q.max_attempts, v_cap,
          p_q.backoff_min, p_q.backoff_max, v_clock;

  IF p_q.partition_column IS NOT NULL AND v_keys IS NOT NULL THEN
    PERFORM outbox._refresh_heads(p_q, pg_catalog.array_remove(v_keys, NULL));
  END IF;
  RETURN COALESCE(v_done, '{}');
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- Records 'sent', 'transient' or 'permanent' for one leased row, only while lease_token still
-- matches. false = the lease is no longer ours (expired and re-claimed, released, or already
-- recorded): then nothing in the row changed.
CREATE OR REPLACE FUNCTION outbox.apply_result(queue text, id bigint, lease_token uuid, outcome text,
                                               error text DEFAULT NULL)
RETURNS boolean
LANGUAGE plpgsql
VOLATILE
SET search_path = ''
AS $$
DECLARE
  fn constant text := 'apply_result';
  v_q outbox.queues := outbox._queue(fn, queue);
BEGIN
  IF apply_result.id IS NULL THEN
    PERFORM outbox._invalid(fn, 'id must not be NULL');
  END IF;
  IF apply_result.lease_token IS NULL THEN
    PERFORM outbox._invalid(fn, 'lease_token must not be NULL');
  END IF;
  PERFORM outbox._check_outcomes(fn, ARRAY[apply_result.id], ARRAY[outcome], ARRAY[error]);
  RETURN pg_catalog.cardinality(outbox._record(v_q, ARRAY[apply_result.id], ARRAY[apply_result.lease_token],
                                               ARRAY[outcome], ARRAY[error])) = 1;
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- apply_result for a whole batch in one round trip: one row (id, applied) per input id, in input
-- order. Rows whose token no longer matches are reported applied = false and left unchanged.
CREATE OR REPLACE FUNCTION outbox.apply_results(queue text, ids bigint[], lease_tokens uuid[], outcomes text[],
                                                errors text[] DEFAULT NULL)
RETURNS TABLE(id bigint, applied boolean)
LANGUAGE plpgsql
VOLATILE
SET search_path = ''
AS $$
DECLARE
  fn constant text := 'apply_results';
  v_q outbox.queues := outbox._queue(fn, queue);
  v_done bigint[];
BEGIN
  PERFORM outbox._check_outcomes(fn, ids, outcomes, errors);
  PERFORM outbox._check_one_dimension(fn, 'lease_tokens', pg_catalog.array_ndims(lease_tokens));
  IF lease_tokens IS NULL OR pg_catalog.cardinality(lease_tokens) <> pg_catalog.cardinality(ids) THEN
    PERFORM outbox._invalid(fn, pg_catalog.format(
      'lease_tokens must have as many elements as ids (%s), got %s', pg_catalog.cardinality(ids),
      COALESCE(pg_catalog.cardinality(lease_tokens)::text, 'NULL')));
  END IF;
  IF pg_catalog.array_position(lease_tokens, NULL) IS NOT NULL THEN
    PERFORM outbox._invalid(fn, 'lease_tokens must not contain NULL');
  END IF;
  IF pg_catalog.cardinality(ids) = 0 THEN
    RETURN;
  END IF;
  v_done := outbox._record(v_q, ids, lease_tokens, outcomes,
                           COALESCE(errors, pg_catalog.array_fill(NULL::text, ARRAY[pg_catalog.cardinality(ids)])));
  RETURN QUERY SELECT u.id, u.id = ANY (v_done) FROM pg_catalog.unnest(ids) WITH ORDINALITY AS u(id, ord) ORDER BY u.ord;
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- Lease mode: leases up to batch_size deliverable rows for `lease`, each with its own fresh
-- lease_token, in one short transaction. Results come back through apply_result(s) and count only
-- while the token still matches. Order: attempt_count, id (fresh rows overtake retried ones).
-- Due times and leases are read from the clock at the claim, not now(): in a transaction that
-- began long ago now() would hand out a lease that is already over.
CREATE OR REPLACE FUNCTION outbox.claim_batch(queue text, batch_size integer DEFAULT 32, lease interval DEFAULT '30 seconds')
RETURNS TABLE(id bigint, event_type text, payload jsonb, partition_key text, attempt_count integer,
              lease_token uuid, leased_until timestamptz, created_at timestamptz)
LANGUAGE plpgsql
VOLATILE
SET search_path = ''
SET enable_seqscan = off
SET enable_sort = off
SET jit = off
AS $$
DECLARE
  fn constant text := 'claim_batch';
  v_q outbox.queues := outbox._queue(fn, queue);
  v_ids bigint[];
  v_clock timestamptz;
BEGIN
  PERFORM outbox._check_batch_size(fn, batch_size);
  PERFORM outbox._check_lease(fn, lease);
  IF v_q.partition_column IS NULL THEN
    -- One statement: pick, lease and return (each EXECUTE is planned anew, so fewer is faster).
    -- One clock reading for the whole statement: a row is due and leased at the same instant.
    v_clock := pg_catalog.clock_timestamp();
    RETURN QUERY EXECUTE pg_catalog.format(
      'WITH leased AS (
         UPDATE %1$s t SET lease_token = pg_catalog.gen_random_uuid(), leased_until = $4 + $3
         WHERE t.id = ANY (ARRAY(
           SELECT s.id FROM %1$s s
           WHERE s.sent_at IS NULL AND s.attempt_count < $2
             AND (s.next_attempt_at IS NULL OR s.next_attempt_at <= $4)
             AND (s.leased_until IS NULL OR s.leased_until <= $4)
           ORDER BY s.attempt_count, s.id LIMIT $1
           FOR UPDATE SKIP LOCKED))
         RETURNING t.id, t.event_type, t.payload, NULL::text, t.attempt_count, t.lease_token, t.leased_until,
                   t.created_at)
       SELECT * FROM leased ORDER BY 5, 1', v_q.table_oid::regclass)
      USING batch_size, v_q.max_attempts, lease, v_clock;
    RETURN;
  END IF;
  v_ids := outbox._claim(v_q, batch_size, lease, 'lease');
  IF pg_catalog.cardinality(v_ids) = 0 THEN
    -- id = ANY('{}') is constant false, which "implies" any partial index's predicate: the planner
    -- would then walk the claim index end to end to return nothing.
    RETURN;
  END IF;
  RETURN QUERY EXECUTE pg_catalog.format(
    'SELECT t.id, t.event_type, t.payload, %s, t.attempt_count, t.lease_token, t.leased_until, t.created_at
     FROM %s t WHERE t.id = ANY ($1) ORDER BY t.attempt_count, t.id',
    CASE WHEN v_q.partition_column IS NULL THEN 'NULL::text'
         ELSE pg_catalog.format('t.%I::text', v_q.partition_column) END,
    v_q.table_oid::regclass)
    USING v_ids;
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- Lock mode (seed 001's claim transaction): the same deliverable rows as claim_batch, locked
-- FOR UPDATE SKIP LOCKED by the caller's open transaction until it ends. No lease is written: the
-- row lock is the fence, and settle_locked records outcomes in the same transaction, so each row
-- is written once. The claimed ids are remembered in a transaction-local setting for settle_locked.
CREATE OR REPLACE FUNCTION outbox.claim_locked(queue text, batch_size integer DEFAULT 32)
RETURNS TABLE(id bigint, event_type text, payload jsonb, partition_key text, attempt_count integer,
              created_at timestamptz)
LANGUAGE plpgsql
VOLATILE
SET search_path = ''
AS $$
DECLARE
  fn constant text := 'claim_locked';
  v_q outbox.queues := outbox._queue(fn, queue);
  v_ids bigint[];
  v_setting text;
BEGIN
  PERFORM outbox._check_batch_size(fn, batch_size);
  -- _claim leaves out the rows this transaction already holds (SKIP LOCKED does not skip our own
  -- locks), so a row is never handed out twice.
  v_ids := outbox._claim(v_q, batch_size, NULL, 'lock');
  v_setting := 'pgdrain.held_' || v_q.queue_id;
  IF pg_catalog.cardinality(v_ids) = 0 THEN
    RETURN;  -- not even a query: id = ANY('{}') would let the planner pick any partial index
  END IF;
  PERFORM pg_catalog.set_config(v_setting,
    pg_catalog.concat_ws(',', NULLIF(pg_catalog.current_setting(v_setting, true), ''),
                         pg_catalog.array_to_string(v_ids, ',')), true);
  RETURN QUERY EXECUTE pg_catalog.format(
    'SELECT t.id, t.event_type, t.payload, %s, t.attempt_count, t.created_at
     FROM %s t WHERE t.id = ANY ($1) ORDER BY t.attempt_count, t.id',
    CASE WHEN v_q.partition_column IS NULL THEN 'NULL::text'
         ELSE pg_catalog.format('t.%I::text', v_q.partition_column) END,
    v_q.table_oid::regclass)
    USING v_ids;
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- Creates (or adopts) the queue table, exactly the two required partial indexes, the NOTIFY trigger,
-- the TRUNCATE trigger and, for a partitioned queue, the trigger that feeds the commit step; then
-- registers the queue. Idempotent: calling it again with new settings updates them; the partition
-- column can not change. An adopted table keeps its rows; missing lease columns are added as
-- NULL = "free". What the table enforces on producers (CHECKs, column privileges) is
-- outbox._guard_queue_table.
-- Registration follows the table: when the registered table was dropped (or dropped and made
-- again) outside drop_queue, the new table is registered under the same queue_id and every piece
-- of state derived from the old one (partition heads, built-mark, clocks) is dropped first; heads
-- are then rebuilt from the new table's rows.
-- A partitioned queue needs the sequence its ids come from (outbox.queues.id_sequence): the commit
-- step renumbers late rows with it.
-- A created table gets fillfactor 80, so writing a lease is a HOT update (no index touched), and
-- autovacuum settings for a table that is mostly empty and churns.
CREATE OR REPLACE FUNCTION outbox.create_queue(
  queue text,
  partition_column text DEFAULT NULL,
  max_attempts integer DEFAULT 10,
  backoff_min interval DEFAULT '1 second',
  backoff_max interval DEFAULT '30 seconds',
  permanent_policy text DEFAULT 'poison',
  channel text DEFAULT NULL)
RETURNS void
LANGUAGE plpgsql
VOLATILE
SET search_path = ''
SET client_min_messages = warning
AS $$
DECLARE
  fn constant text := 'create_queue';
  v_name text := outbox._queue_name(fn, queue);
  v_schema text := pg_catalog.split_part(v_name, '.', 1);
  v_table text := pg_catalog.split_part(v_name, '.', 2);
  v_col text := pg_catalog.lower(partition_column);
  v_channel text := COALESCE(channel, 'pgdrain_' || v_schema || '_' || v_table);
  v_rel regclass;
  v_old outbox.queues;
  v_type text;
  v_queue_id integer;
  v_missing text;
  v_has_nulls boolean;
  v_sequence regclass;
  v_other text;
  v_new_table boolean;
  v_created boolean := false;
BEGIN
  IF partition_column IS NOT NULL AND partition_column !~ '^[A-Za-z_][A-Za-z0-9_]{0,62}$' THEN
    PERFORM outbox._invalid(fn, pg_catalog.format(
      'partition_column must be a plain column name, got %L', partition_column));
  END IF;
  IF v_col IN ('id', 'event_type', 'payload', 'created_at', 'attempt_count', 'next_attempt_at',
               'sent_at', 'leased_until', 'lease_token', 'last_error') THEN
    PERFORM outbox._invalid(fn, pg_catalog.format(
      'partition_column must not be one of the queue''s own columns, got %L', partition_column));
  END IF;
  IF max_attempts IS NULL OR max_attempts < 1 OR max_attempts > 1000 THEN
    PERFORM outbox._invalid(fn, pg_catalog.format(
      'max_attempts must be between 1 and 1000, got %s', COALESCE(max_attempts::text, 'NULL')));
  END IF;
  IF backoff_min IS NULL OR backoff_min <= interval '0' THEN
    PERFORM outbox._invalid(fn, pg_catalog.format(
      'backoff_min must be greater than 0, got %s', COALESCE(backoff_min::text, 'NULL')));
  END IF;
  IF backoff_max IS NULL OR backoff_max < backoff_min OR backoff_max > interval '1 day' THEN
    PERFORM outbox._invalid(fn, pg_catalog.format(
      'backoff_max must be between backoff_min (%s) and 1 day, got %s',
      backoff_min, COALESCE(backoff_max::text, 'NULL')));
  END IF;
  IF permanent_policy IS NULL OR permanent_policy NOT IN ('poison', 'retry') THEN
    PERFORM outbox._invalid(fn, pg_catalog.format(
      'permanent_policy must be ''poison'' or ''retry'', got %L', permanent_policy));
  END IF;
  IF permanent_policy = 'retry' AND v_col IS NOT NULL THEN
    PERFORM outbox._invalid(fn,
      'permanent_policy ''retry'' is not allowed with a partition_column: an event that can never '
      'apply would wedge its partition forever');
  END IF;
  IF v_channel !~ '^[A-Za-z_][A-Za-z0-9_]{0,62}$' THEN
    PERFORM outbox._invalid(fn, pg_catalog.format(
      'channel must be a plain name of at most 63 characters, got %L', v_channel));
  END IF;
  v_channel := pg_catalog.lower(v_channel);

  IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_namespace n WHERE n.nspname = v_schema) THEN
    RAISE EXCEPTION '%: schema % does not exist', fn, v_schema USING ERRCODE = '3F000';
  END IF;
  v_rel := pg_catalog.to_regclass(pg_catalog.format('%I.%I', v_schema, v_table));

  -- The registration is this table's only while its oid is the table's; a registration whose
  -- table was dropped (and maybe made again) is stale, and the new table is a new queue.
  SELECT * INTO v_old FROM outbox.queues q WHERE q.queue = v_name FOR UPDATE;
  IF FOUND AND v_old.table_oid = v_rel AND v_old.partition_column IS DISTINCT FROM v_col THEN
    PERFORM outbox._invalid(fn, pg_catalog.format(
      'partition_column of registered queue %s is %s and can not change to %s (drop_queue first)',
      v_name, COALESCE(v_old.partition_column, 'NULL'), COALESCE(v_col, 'NULL')));
  END IF;
  IF v_rel IS NOT NULL THEN
    SELECT q.queue INTO v_other FROM outbox.queues q WHERE q.table_oid = v_rel AND q.queue <> v_name;
    IF v_other IS NOT NULL THEN
      PERFORM outbox._invalid(fn, pg_catalog.format(
        'table %s is already registered as queue %s (renamed?); drop_queue(%L) first', v_name, v_other, v_other));
    END IF;
  END IF;
  v_new_table := v_old.queue_id IS NULL OR v_old.table_oid IS DISTINCT FROM v_rel;

  IF v_rel IS NULL THEN
    EXECUTE pg_catalog.format(
      'CREATE TABLE %I.%I (
         id bigint GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY,
         event_type text NOT NULL,
         payload jsonb NOT NULL,
         created_at timestamptz NOT NULL DEFAULT pg_catalog.now(),
         attempt_count integer NOT NULL DEFAULT 0,
         next_attempt_at timestamptz,
         sent_at timestamptz,
         leased_until timestamptz,
         lease_token uuid,
         last_error text%s
       ) WITH (fillfactor = 80, autovacuum_vacuum_scale_factor = 0.01, autovacuum_analyze_scale_factor = 0.01,
               autovacuum_vacuum_insert_scale_factor = 0.01)',
      v_schema, v_table,
      CASE WHEN v_col IS NULL THEN '' ELSE pg_catalog.format(', %I text NOT NULL', v_col) END);
    v_rel := pg_catalog.format('%I.%I', v_schema, v_table)::regclass;
    v_created := true;
  ELSE
    IF (SELECT c.relkind FROM pg_catalog.pg_class c WHERE c.oid = v_rel) NOT IN ('r', 'p') THEN
      PERFORM outbox._invalid(fn, pg_catalog.format('queue %s exists but is not a table', v_name));
    END IF;
    -- Adopt: the columns the application already writes must be there with the right types.
    SELECT pg_catalog.string_agg(pg_catalog.format('%s %s', r.col, r.typ), ', ') INTO v_missing
    FROM (VALUES ('id', 'bigint'), ('event_type', 'text'), ('payload', 'jsonb'),
                 ('created_at', 'timestamp with time zone')) AS r(col, typ)
    WHERE NOT EXISTS (
      SELECT 1 FROM pg_catalog.pg_attribute a
      WHERE a.attrelid = v_rel AND a.attname = r.col AND NOT a.attisdropped
        AND pg_catalog.format_type(a.atttypid, a.atttypmod) = r.typ);
    IF v_missing IS NOT NULL THEN
      PERFORM outbox._invalid(fn, pg_catalog.format(
        'queue %s exists but lacks required columns (or has other types): %s', v_name, v_missing));
    END IF;
    IF NOT EXISTS (
      SELECT 1 FROM pg_catalog.pg_index i
      WHERE i.indrelid = v_rel AND i.indisprimary AND i.indnatts = 1
        AND i.indkey[0] = (SELECT a.attnum FROM pg_catalog.pg_attribute a
                           WHERE a.attrelid = v_rel AND a.attname = 'id')) THEN
      PERFORM outbox._invalid(fn, pg_catalog.format('queue %s exists but id is not its primary key', v_name));
    END IF;
    -- NULL in the new columns means "free / never tried", exactly the state of a fresh row.
    EXECUTE pg_catalog.format(
      'ALTER TABLE %s
         ADD COLUMN IF NOT EXISTS attempt_count integer NOT NULL DEFAULT 0,
         ADD COLUMN IF NOT EXISTS next_attempt_at timestamptz,
         ADD COLUMN IF NOT EXISTS sent_at timestamptz,
         ADD COLUMN IF NOT EXISTS leased_until timestamptz,
         ADD COLUMN IF NOT EXISTS lease_token uuid,
         ADD COLUMN IF NOT EXISTS last_error text', v_rel);
    IF v_col IS NOT NULL THEN
      IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_attribute a
                     WHERE a.attrelid = v_rel AND a.attname = v_col AND NOT a.attisdropped) THEN
        PERFORM outbox._invalid(fn, pg_catalog.format(
          'partition_column %s does not exist in %s', v_col, v_name));
      END IF;
      -- A NULL key would make a row independent of its partition and silently lose order.
      EXECUTE pg_catalog.format('SELECT EXISTS (SELECT 1 FROM %s WHERE %I IS NULL)', v_rel, v_col)
        INTO STRICT v_has_nulls;
      IF v_has_nulls THEN
        PERFORM outbox._invalid(fn, pg_catalog.format(
          'partition_column %s of %s has NULL values; fill them before adopting the table', v_col, v_name));
      END IF;
      EXECUTE pg_catalog.format('ALTER TABLE %s ALTER COLUMN %I SET NOT NULL', v_rel, v_col);
    END IF;
  END IF;

  IF v_col IS NOT NULL THEN
    SELECT pg_catalog.format_type(a.atttypid, a.atttypmod) INTO v_type
    FROM pg_catalog.pg_attribute a WHERE a.attrelid = v_rel AND a.attname = v_col;
  END IF;

  -- Renumbering late rows at commit (per-key commit order) takes new ids from this sequence.
  v_sequence := outbox._id_sequence(v_rel);
  IF v_col IS NOT NULL AND v_sequence IS NULL THEN
    PERFORM outbox._invalid(fn, pg_catalog.format(
      'queue %s is partitioned, so its id must come from an ascending sequence (identity, serial or '
      'DEFAULT nextval(''a_sequence'')): per-key commit order renumbers late rows with it', v_name));
  END IF;

  -- Everything derived from the old table goes before the new one is registered.
  IF v_old.queue_id IS NOT NULL AND v_new_table THEN
    DELETE FROM outbox.partition_heads h WHERE h.queue_id = v_old.queue_id;
    DELETE FROM outbox.partition_heads_built b WHERE b.queue_id = v_old.queue_id;
    DELETE FROM outbox.partition_clocks c WHERE c.queue_id = v_old.queue_id;
  END IF;

  -- clock_base: every id the sequence gave out so far counts as committed for per-key commit order
  -- (sessions with a cached sequence may still hand out smaller ones; their rows are then late).
  INSERT INTO outbox.queues AS q (queue, table_oid, partition_column, partition_type, max_attempts,
                                  backoff_min, backoff_max, permanent_policy, channel, id_sequence, clock_base)
  VALUES (v_name, v_rel, v_col, v_type, create_queue.max_attempts, create_queue.backoff_min,
          create_queue.backoff_max, create_queue.permanent_policy, v_channel, v_sequence,
          COALESCE(pg_catalog.pg_sequence_last_value(v_sequence), 0))
  ON CONFLICT ON CONSTRAINT queues_queue_key DO UPDATE
    SET max_attempts = EXCLUDED.max_attempts, backoff_min = EXCLUDED.backoff_min,
        backoff_max = EXCLUDED.backoff_max, permanent_policy = EXCLUDED.permanent_policy,
        channel = EXCLUDED.channel, table_oid = EXCLUDED.table_oid,
        partition_column = EXCLUDED.partition_column, partition_type = EXCLUDED.partition_type,
        id_sequence = EXCLUDED.id_sequence,
        clock_base = CASE WHEN q.table_oid = EXCLUDED.table_oid THEN q.clock_base ELSE EXCLUDED.clock_base END
  RETURNING q.queue_id INTO v_queue_id;

  -- The two required indexes, unless an equivalent one (any name) is already there.
  IF v_col IS NOT NULL AND NOT EXISTS (
      SELECT 1 FROM outbox._queue_indexes(v_rel, v_col) x WHERE x.role = 'partition') THEN
    EXECUTE pg_catalog.format('CREATE INDEX %I ON %s (%I, id) WHERE sent_at IS NULL',
                              pg_catalog.left(v_table, 40) || '_pgdrain_partition', v_rel, v_col);
  END IF;
  IF NOT EXISTS (SELECT 1 FROM outbox._queue_indexes(v_rel, v_col) x WHERE x.role = 'claim') THEN
    EXECUTE pg_catalog.format('CREATE INDEX %I ON %s (attempt_count, id) WHERE sent_at IS NULL',
                              pg_catalog.left(v_table, 40) || '_pgdrain_claim', v_rel);
  END IF;

  -- CHECKs, the producers' column privileges (plain INSERT of an event, RETURNING id; the heads
  -- trigger runs as owner) and the TRUNCATE trigger.
  PERFORM outbox._guard_queue_table(v_rel, v_col, NOT v_created);

  EXECUTE pg_catalog.format('DROP TRIGGER IF EXISTS pgdrain_notify ON %s', v_rel);
  EXECUTE pg_catalog.format(
    'CREATE TRIGGER pgdrain_notify AFTER INSERT ON %s FOR EACH STATEMENT
       EXECUTE FUNCTION outbox.tg_queue__notify(%L, %L)', v_rel, v_channel, v_name);
  EXECUTE pg_catalog.format('DROP TRIGGER IF EXISTS pgdrain_heads ON %s', v_rel);
  EXECUTE pg_catalog.format('DROP FUNCTION IF EXISTS outbox.%I()', 'tg_queue__heads_q' || v_queue_id);
  IF v_col IS NOT NULL THEN
    PERFORM outbox._install_heads_trigger(q) FROM outbox.queues q WHERE q.queue_id = v_queue_id;
    -- Rows that were pending before adoption (or in the table that replaced the registered one)
    -- need their partition heads too; a registered table already has them, kept by the triggers.
    -- A larger max_attempts makes rows that were poisoned deliverable again, possibly below their
    -- partitions' floors or in partitions without a head: they are searched from scratch too.
    IF v_new_table OR create_queue.max_attempts > v_old.max_attempts THEN
      PERFORM outbox._rebuild_heads(v_queue_id);
    END IF;
  END IF;
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- Convenience insert; a plain INSERT into the queue table is equally valid (the triggers do the
-- rest). partition_key is required (and must not be empty or blank) on a partitioned queue and
-- refused on an unpartitioned one. The payload must be a JSON value other than null.
CREATE OR REPLACE FUNCTION outbox.enqueue(queue text, event_type text, payload jsonb, partition_key text DEFAULT NULL)
RETURNS bigint
LANGUAGE plpgsql
VOLATILE
SET search_path = ''
AS $$
DECLARE
  fn constant text := 'enqueue';
  v_q outbox.queues := outbox._queue(fn, queue);
  v_id bigint;
BEGIN
  IF enqueue.event_type IS NULL OR pg_catalog.btrim(enqueue.event_type) = '' THEN
    PERFORM outbox._invalid(fn, 'event_type must be a non-empty string');
  END IF;
  IF enqueue.payload IS NULL THEN
    PERFORM outbox._invalid(fn, 'payload must not be NULL (use ''{}''::jsonb for an empty payload)');
  END IF;
  IF pg_catalog.jsonb_typeof(enqueue.payload) = 'null' THEN
    PERFORM outbox._invalid(fn, 'payload must not be JSON null (use ''{}''::jsonb for an empty payload)');
  END IF;
  IF v_q.partition_column IS NULL THEN
    IF enqueue.partition_key IS NOT NULL THEN
      PERFORM outbox._invalid(fn, pg_catalog.format(
        'partition_key must be NULL: queue %s has no partition column', v_q.queue));
    END IF;
    EXECUTE pg_catalog.format('INSERT INTO %s (event_type, payload) VALUES ($1, $2) RETURNING id',
                              v_q.table_oid::regclass)
      INTO v_id USING enqueue.event_type, enqueue.payload;
  ELSE
    IF enqueue.partition_key IS NULL THEN
      PERFORM outbox._invalid(fn, pg_catalog.format(
        'partition_key must not be NULL: queue %s is partitioned by %s', v_q.queue, v_q.partition_column));
    END IF;
    IF pg_catalog.btrim(enqueue.partition_key) = '' THEN
      PERFORM outbox._invalid(fn, pg_catalog.format(
        'partition_key must be a non-empty string, got %s', pg_catalog.quote_literal(enqueue.partition_key)));
    END IF;
    EXECUTE pg_catalog.format('INSERT INTO %s (event_type, payload, %I) VALUES ($1, $2, $3::%s) RETURNING id',
                              v_q.table_oid::regclass, v_q.partition_column, v_q.partition_type)
      INTO v_id USING enqueue.event_type, enqueue.payload, enqueue.partition_key;
  END IF;
  RETURN v_id;
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- Operator: gives poisoned rows (all of them, or the given ids) a fresh start: attempt_count 0,
-- due now, last_error kept for the record. Returns how many rows were requeued.
-- On a partitioned queue a requeued row goes to the TAIL of its key, as if committed now: it gets a
-- new id from the queue's sequence and is delivered after every row of its key committed before
-- the requeue, never before a successor that was already delivered (an old "register" must not
-- come back after the "unregister" that followed it without the operator asking for exactly that;
-- see docs/ordering.md). The rows then go through the producers' commit step (outbox._note_written):
-- order against concurrent producers, heads, NOTIFY. Their event is the same; only the position moves.
CREATE OR REPLACE FUNCTION outbox.requeue_poisoned(queue text, ids bigint[] DEFAULT NULL)
RETURNS bigint
LANGUAGE plpgsql
VOLATILE
SET search_path = ''
AS $$
DECLARE
  fn constant text := 'requeue_poisoned';
  v_q outbox.queues := outbox._queue(fn, queue);
  v_count bigint;
  v_old bigint[];
  v_keys text[];
  v_mins bigint[];
  v_maxs bigint[];
BEGIN
  IF ids IS NOT NULL AND pg_catalog.array_position(ids, NULL) IS NOT NULL THEN
    PERFORM outbox._invalid(fn, 'ids must not contain NULL');
  END IF;
  IF v_q.partition_column IS NULL THEN
    EXECUTE pg_catalog.format(
      'UPDATE %s t SET attempt_count = 0, next_attempt_at = NULL, leased_until = NULL, lease_token = NULL
       WHERE t.sent_at IS NULL AND t.attempt_count >= $1 AND ($2::bigint[] IS NULL OR t.id = ANY ($2))',
      v_q.table_oid::regclass)
      USING v_q.max_attempts, ids;
    GET DIAGNOSTICS v_count = ROW_COUNT;
    IF v_count > 0 THEN
      PERFORM pg_catalog.pg_notify(v_q.channel, v_q.queue);
    END IF;
    RETURN v_count;
  END IF;

  IF v_q.id_sequence IS NULL THEN
    RAISE EXCEPTION '%: queue % has no id sequence to move requeued rows to the tail of their keys (call outbox.create_queue again)',
      fn, v_q.queue USING ERRCODE = '55000';
  END IF;
  EXECUTE pg_catalog.format(
    'SELECT pg_catalog.array_agg(t.id ORDER BY t.id) FROM %s t
     WHERE t.sent_at IS NULL AND t.attempt_count >= $1 AND ($2::bigint[] IS NULL OR t.id = ANY ($2))',
    v_q.table_oid::regclass)
    INTO v_old USING v_q.max_attempts, ids;
  IF v_old IS NULL THEN
    RETURN 0;
  END IF;
  -- New ids in the order of the old ones (generate_series yields in order, nextval runs per row).
  EXECUTE pg_catalog.format(
    'WITH moved AS (
       SELECT o.old_id, n.new_id
       FROM unnest($1::bigint[]) WITH ORDINALITY AS o(old_id, i)
       JOIN (SELECT g.i, pg_catalog.nextval($3) AS new_id FROM pg_catalog.generate_series(1, $4) AS g(i)) n
         ON n.i = o.i),
     upd AS (
       UPDATE %1$s t SET id = m.new_id, attempt_count = 0, next_attempt_at = NULL, leased_until = NULL,
                         lease_token = NULL
       FROM moved m WHERE t.id = m.old_id AND t.sent_at IS NULL AND t.attempt_count >= $2
       RETURNING t.id, t.%2$I::text AS key)
     SELECT pg_catalog.array_agg(k ORDER BY k), pg_catalog.array_agg(lo ORDER BY k), pg_catalog.array_agg(hi ORDER BY k),
            COALESCE(pg_catalog.sum(n), 0)
     FROM (SELECT upd.key AS k, pg_catalog.min(upd.id) AS lo, pg_catalog.max(upd.id) AS hi, pg_catalog.count(*) AS n
           FROM upd GROUP BY 1) s',
    v_q.table_oid::regclass, v_q.partition_column)
    INTO v_keys, v_mins, v_maxs, v_count USING v_old, v_q.max_attempts, v_q.id_sequence, pg_catalog.cardinality(v_old);
  IF v_keys IS NULL THEN
    RETURN 0;
  END IF;
  PERFORM outbox._note_written(v_q.queue_id, v_q.table_oid, v_keys, v_mins, v_maxs);
  -- The commit step notifies only for heads it creates or wakes; a requeue is an operator asking
  -- for delivery now, so say so whatever the heads were.
  PERFORM pg_catalog.pg_notify(v_q.channel, v_q.queue);
  RETURN v_count;
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- Lock mode: records outcomes for rows this transaction claimed with claim_locked and still holds.
-- Refuses (SQLSTATE 55000, nothing changed) any id this transaction does not hold: the id must be
-- in claim_locked's list for this transaction and its row lock must be this transaction's, taken at
-- the top level or in a savepoint that is still open or was released (a rolled-back savepoint
-- took its lock, and its part of the list, with it). Returns how many rows were recorded. A
-- settled row leaves the held set, so it is recorded at most once per claim: settling it again is
-- refused like any row not held (else a second 'transient' would count a second attempt).
CREATE OR REPLACE FUNCTION outbox.settle_locked(queue text, ids bigint[], outcomes text[], errors text[] DEFAULT NULL)
RETURNS bigint
LANGUAGE plpgsql
VOLATILE
SET search_path = ''
AS $$
DECLARE
  fn constant text := 'settle_locked';
  v_q outbox.queues := outbox._queue(fn, queue);
  v_held bigint[];
  v_foreign bigint;
  v_count bigint;
BEGIN
  PERFORM outbox._check_outcomes(fn, ids, outcomes, errors);
  IF pg_catalog.cardinality(ids) = 0 THEN
    RETURN 0;
  END IF;
  v_held := pg_catalog.string_to_array(
    NULLIF(pg_catalog.current_setting('pgdrain.held_' || v_q.queue_id, true), ''), ',')::bigint[];
  SELECT x INTO v_foreign FROM pg_catalog.unnest(ids) x WHERE x <> ALL (COALESCE(v_held, '{}')) LIMIT 1;
  IF NOT FOUND THEN
    -- The setting is only a list any session could SET LOCAL: the row lock itself must be ours
    -- too (outbox._locked_here: claim_locked's FOR UPDATE, in this transaction or one of its
    -- live savepoints).
    v_foreign := outbox._locked_here(v_q.table_oid::regclass, ids);
  END IF;
  IF v_foreign IS NOT NULL THEN
    RAISE EXCEPTION '%: row % of % is not held by this transaction (claim it with claim_locked in the same transaction)',
      fn, v_foreign, v_q.queue USING ERRCODE = '55000';
  END IF;
  v_count := pg_catalog.cardinality(outbox._record(v_q, ids, NULL, outcomes,
    COALESCE(errors, pg_catalog.array_fill(NULL::text, ARRAY[pg_catalog.cardinality(ids)]))));
  PERFORM pg_catalog.set_config('pgdrain.held_' || v_q.queue_id,
    COALESCE((SELECT pg_catalog.string_agg(h::text, ',') FROM pg_catalog.unnest(v_held) h WHERE h <> ALL (ids)), ''),
    true);
  RETURN v_count;
END;
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
GRANT USAGE ON SCHEMA outbox TO pgdrain_worker, pgdrain_producer, pgdrain_operator;

-- SECURITY DEFINER: the callers get exactly what the function does to registered queues and no
-- privilege on any table, so a worker can not bypass the fencing token with a plain UPDATE and
-- outbox.partition_heads stays private. Each of these validates its arguments, pins search_path
-- and builds SQL only with format('%I') / regclass.
ALTER FUNCTION outbox.enqueue(text, text, jsonb, text) SECURITY DEFINER;
ALTER FUNCTION outbox.tg_queue__commit() SECURITY DEFINER;
ALTER FUNCTION outbox.tg_queue__truncate() SECURITY DEFINER;
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
ALTER FUNCTION outbox.queue_info(text) SECURITY DEFINER;
ALTER FUNCTION outbox.next_due(text) SECURITY DEFINER;
ALTER FUNCTION outbox.repair(text, boolean) SECURITY DEFINER;

-- Producers: enqueue. A plain INSERT needs INSERT on the event's columns of the queue table, which
-- create_queue grants per table (outbox._guard_queue_table); the heads, commit and truncate triggers
-- run as definer and are executable by nobody.
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

-- Workers and operators: a queue's settings, when its next row is due (the drainer's sleep), and the
-- repair pass over its partition heads (the drainer runs it periodically; pgdrain check dry-runs it).
GRANT EXECUTE ON FUNCTION
  outbox.queue_info(text),
  outbox.next_due(text),
  outbox.repair(text, boolean)
  TO pgdrain_worker, pgdrain_operator;

-- Workers also read what the Go drainer reports about its queue: the gauges (WithMetrics), wedged
-- partitions (WithWedgeObserver) and the index check at start. All read-only, no payloads.
GRANT EXECUTE ON FUNCTION
  outbox.stats(text),
  outbox.wedged_partitions(text, interval, integer),
  outbox.check_indexes(text)
  TO pgdrain_worker;

-- create_queue and drop_queue stay SECURITY INVOKER and are granted to nobody: they create and
-- alter tables and triggers, which only the owner of the schema (the migrating role) should do.
-- +goose StatementEnd

