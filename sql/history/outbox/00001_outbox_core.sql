-- +goose Up
-- +goose StatementBegin
CREATE SCHEMA outbox;
COMMENT ON SCHEMA outbox IS 'pgdrain: transactional outbox drainer (leases with fencing tokens, or the claim transaction)';

CREATE TABLE outbox.queues (
  queue_id integer GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  queue text NOT NULL CONSTRAINT queues_queue_key UNIQUE,
  table_oid oid NOT NULL,
  partition_column text,
  partition_type text,
  max_attempts integer NOT NULL CHECK (max_attempts BETWEEN 1 AND 1000),
  backoff_min interval NOT NULL,
  backoff_max interval NOT NULL,
  permanent_policy text NOT NULL CHECK (permanent_policy IN ('poison', 'retry')),
  channel text NOT NULL,
  created_at timestamptz NOT NULL DEFAULT now(),
  CHECK (permanent_policy = 'poison' OR partition_column IS NULL),
  CHECK ((partition_column IS NULL) = (partition_type IS NULL))
);
COMMENT ON TABLE outbox.queues IS 'Registry of queues: one row per queue table, written by outbox.create_queue.';

-- One row per partition that has pending work: its first deliverable row (head_id), and until when
-- it is parked (leased or backing off; NULL = ready). Claims read this table, never the blocked
-- successors, so their cost does not grow with the backlog.
-- UNLOGGED: it is derived state, rewritten on every claim and result, and rebuildable from the
-- queue tables; not writing WAL for it is most of what it costs. After a crash (or on a promoted
-- standby) PostgreSQL empties it, and so outbox.partition_heads_built, and the next claim of each
-- queue rebuilds its heads from the queue table (outbox._restore_heads).
CREATE UNLOGGED TABLE outbox.partition_heads (
  queue_id integer NOT NULL,
  partition_key text NOT NULL,
  head_id bigint,
  attempt_count integer NOT NULL DEFAULT 0,
  parked_until timestamptz,
  floor_id bigint NOT NULL DEFAULT 0,
  PRIMARY KEY (queue_id, partition_key)
) WITH (fillfactor = 70, autovacuum_vacuum_scale_factor = 0.02, autovacuum_analyze_scale_factor = 0.02);
CREATE INDEX partition_heads_ready ON outbox.partition_heads (queue_id, attempt_count, head_id)
  WHERE parked_until IS NULL;
CREATE INDEX partition_heads_parked ON outbox.partition_heads (queue_id, parked_until)
  WHERE parked_until IS NOT NULL;
COMMENT ON TABLE outbox.partition_heads IS
  'Claimable partition heads of partitioned queues (internal; maintained by triggers and the outbox functions).';
COMMENT ON COLUMN outbox.partition_heads.floor_id IS
  'Every row of the partition with a smaller id is sent or poisoned: searches for the head start here, '
  'so poisoned rows are skipped once, not on every claim. Raised only while no producer of the '
  'partition is in flight (its advisory lock, see tg_queue__heads); a producer whose rows fall below it lowers it.';
COMMENT ON COLUMN outbox.partition_heads.parked_until IS
  'Until when the head is not claimable (its lease or backoff); NULL = ready to claim.';

-- A row per partitioned queue whose heads are complete. Emptied with partition_heads by crash
-- recovery, which is how a claim knows it must rebuild them first.
CREATE UNLOGGED TABLE outbox.partition_heads_built (
  queue_id integer PRIMARY KEY
);
COMMENT ON TABLE outbox.partition_heads_built IS
  'Partitioned queues whose partition_heads are complete (internal; emptied by crash recovery).';
-- +goose StatementEnd

-- +goose StatementBegin
-- Exponential backoff with equal jitter: the n-th retry waits between half and all of
-- min * 2^(n-1), capped at max, and never less than min.
CREATE OR REPLACE FUNCTION outbox._backoff(p_attempt integer, p_min interval, p_max interval)
RETURNS interval
LANGUAGE sql
VOLATILE
SET search_path = ''
AS $$
  SELECT GREATEST(p_min, d / 2 + d / 2 * pg_catalog.random())
  FROM (SELECT LEAST(p_max, p_min * pg_catalog.power(2, LEAST(GREATEST(p_attempt, 1) - 1, 30))) AS d) s;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- batch_size must be 1..10000: a claim larger than that holds too many rows in one statement.
CREATE OR REPLACE FUNCTION outbox._check_batch_size(p_function text, p_batch_size integer)
RETURNS void
LANGUAGE plpgsql
IMMUTABLE
SET search_path = ''
AS $$
BEGIN
  IF p_batch_size IS NULL OR p_batch_size < 1 OR p_batch_size > 10000 THEN
    PERFORM outbox._invalid(p_function, pg_catalog.format(
      'batch_size must be between 1 and 10000, got %s', COALESCE(p_batch_size::text, 'NULL')));
  END IF;
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- A lease must be positive and at most one day: longer leases only hide crashed workers.
CREATE OR REPLACE FUNCTION outbox._check_lease(p_function text, p_lease interval)
RETURNS void
LANGUAGE plpgsql
IMMUTABLE
SET search_path = ''
AS $$
BEGIN
  IF p_lease IS NULL OR p_lease <= interval '0' OR p_lease > interval '1 day' THEN
    PERFORM outbox._invalid(p_function, pg_catalog.format(
      'lease must be greater than 0 and at most 1 day, got %s', COALESCE(p_lease::text, 'NULL')));
  END IF;
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- Validates the parallel arrays of a batch of results: same lengths, at most 10000, no NULL or
-- duplicate id, every outcome one of 'sent', 'transient', 'permanent'.
CREATE OR REPLACE FUNCTION outbox._check_outcomes(p_function text, p_ids bigint[], p_outcomes text[],
                                                  p_errors text[])
RETURNS void
LANGUAGE plpgsql
IMMUTABLE
SET search_path = ''
AS $$
DECLARE
  v_bad text;
BEGIN
  IF p_ids IS NULL THEN
    PERFORM outbox._invalid(p_function, 'ids must not be NULL');
  END IF;
  IF pg_catalog.cardinality(p_ids) > 10000 THEN
    PERFORM outbox._invalid(p_function, pg_catalog.format(
      'ids must have at most 10000 elements, got %s', pg_catalog.cardinality(p_ids)));
  END IF;
  IF p_outcomes IS NULL OR pg_catalog.cardinality(p_outcomes) <> pg_catalog.cardinality(p_ids) THEN
    PERFORM outbox._invalid(p_function, pg_catalog.format(
      'outcomes must have as many elements as ids (%s), got %s', pg_catalog.cardinality(p_ids),
      COALESCE(pg_catalog.cardinality(p_outcomes)::text, 'NULL')));
  END IF;
  IF p_errors IS NOT NULL AND pg_catalog.cardinality(p_errors) <> pg_catalog.cardinality(p_ids) THEN
    PERFORM outbox._invalid(p_function, pg_catalog.format(
      'errors must be NULL or have as many elements as ids (%s), got %s',
      pg_catalog.cardinality(p_ids), pg_catalog.cardinality(p_errors)));
  END IF;
  IF pg_catalog.array_position(p_ids, NULL) IS NOT NULL THEN
    PERFORM outbox._invalid(p_function, 'ids must not contain NULL');
  END IF;
  IF (SELECT pg_catalog.count(DISTINCT x) FROM pg_catalog.unnest(p_ids) x) <> pg_catalog.cardinality(p_ids) THEN
    PERFORM outbox._invalid(p_function, 'ids must be distinct');
  END IF;
  SELECT o INTO v_bad FROM pg_catalog.unnest(p_outcomes) o
  WHERE o IS NULL OR o NOT IN ('sent', 'transient', 'permanent') LIMIT 1;
  IF FOUND THEN
    PERFORM outbox._invalid(p_function, pg_catalog.format(
      'outcome must be ''sent'', ''transient'' or ''permanent'', got %s',
      COALESCE(pg_catalog.quote_literal(v_bad), 'NULL')));
  END IF;
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- The claim behind claim_batch (mode 'lease') and claim_locked (mode 'lock'). Returns the ids of
-- the claimed rows; the caller reads them back. Deliverable = unsent, not poisoned, due, lease free
-- or expired, and on a partitioned queue the first deliverable row of its partition.
--
-- Partitioned queues claim through outbox.partition_heads (one row per partition with pending
-- work), never through the pending rows themselves, so blocked successors, leased heads, heads in
-- backoff and poisoned rows cost nothing: a head that is leased or backing off is "parked" until
-- its time and is woken (at most a bounded number per call) when that time has come. Heads are
-- locked FOR NO KEY UPDATE SKIP LOCKED, which concurrent claimers skip and producers (who hold
-- only advisory locks) do not wait for. Each candidate is still checked against the FIFO rule on the queue table,
-- from the partition's floor (below it every row is sent or poisoned), so poisoned rows in front of
-- a head are not walked again on every claim.
CREATE OR REPLACE FUNCTION outbox._claim(p_q outbox.queues, p_batch_size integer, p_lease interval, p_mode text)
RETURNS bigint[]
LANGUAGE plpgsql
VOLATILE
SET search_path = ''
SET enable_seqscan = off
SET enable_sort = off
SET enable_hashjoin = off
SET enable_mergejoin = off
SET enable_bitmapscan = off
SET enable_material = off
SET plan_cache_mode = force_generic_plan
SET jit = off
AS $$
DECLARE
  v_table regclass := p_q.table_oid::regclass;
  v_due constant text := 't.sent_at IS NULL AND t.attempt_count < $2
    AND (t.next_attempt_at IS NULL OR t.next_attempt_at <= pg_catalog.now())
    AND (t.leased_until IS NULL OR t.leased_until <= pg_catalog.now())';
  v_all bigint[] := '{}';
  v_ids bigint[];
  v_keys text[];
  v_heads bigint[];
  v_floors bigint[];
  v_ctids tid[];
  v_claimed_ctids tid[];
  v_claimed_keys text[];
  v_stale text[];
  v_remaining integer := p_batch_size;
BEGIN
  IF p_q.partition_column IS NULL THEN
    EXECUTE pg_catalog.format(
      'SELECT pg_catalog.array_agg(id) FROM (
         SELECT t.id FROM %s t WHERE %s ORDER BY t.attempt_count, t.id LIMIT $1 FOR UPDATE SKIP LOCKED) s',
      v_table, v_due)
      INTO v_all USING p_batch_size, p_q.max_attempts;
    v_all := COALESCE(v_all, '{}');
    IF p_mode = 'lease' AND pg_catalog.cardinality(v_all) > 0 THEN
      EXECUTE pg_catalog.format(
        'UPDATE %s SET lease_token = pg_catalog.gen_random_uuid(), leased_until = pg_catalog.now() + $2
         WHERE id = ANY ($1)', v_table)
        USING v_all, p_lease;
    END IF;
    RETURN v_all;
  END IF;

  IF NOT EXISTS (SELECT 1 FROM outbox.partition_heads_built b WHERE b.queue_id = p_q.queue_id) THEN
    PERFORM outbox._restore_heads(p_q);
  END IF;

  -- Wake parked heads whose lease or backoff has ended, oldest first, a bounded number per call.
  -- By ctid: a TID scan touches exactly these heads whatever the statistics say.
  UPDATE outbox.partition_heads h SET parked_until = NULL
  WHERE h.ctid = ANY (ARRAY(
    SELECT w.ctid FROM outbox.partition_heads w
    WHERE w.queue_id = p_q.queue_id AND w.parked_until <= pg_catalog.now()
    ORDER BY w.parked_until
    LIMIT GREATEST(4 * p_batch_size, 64)
    FOR NO KEY UPDATE SKIP LOCKED));

  FOR pass IN 1..3 LOOP
    SELECT pg_catalog.array_agg(s.partition_key), pg_catalog.array_agg(s.head_id),
           pg_catalog.array_agg(s.floor_id), pg_catalog.array_agg(s.ctid)
      INTO v_keys, v_heads, v_floors, v_ctids
    FROM (SELECT h.partition_key, h.head_id, h.floor_id, h.ctid FROM outbox.partition_heads h
          WHERE h.queue_id = p_q.queue_id AND h.parked_until IS NULL
            -- In lock mode claimed heads are not parked, and SKIP LOCKED does not skip our own
            -- locks: without this a later pass would take them again.
            AND (h.head_id IS NULL OR h.head_id <> ALL (v_all))
          ORDER BY h.attempt_count, h.head_id
          LIMIT v_remaining
          FOR NO KEY UPDATE SKIP LOCKED) s;
    EXIT WHEN v_keys IS NULL;

    EXECUTE pg_catalog.format(
      'SELECT pg_catalog.array_agg(t.id), pg_catalog.array_agg(t.%2$I::text), pg_catalog.array_agg(t.head_ctid)
       FROM (
         SELECT t.id, t.%2$I, c.head_ctid FROM unnest($1::bigint[], $3::bigint[], $4::tid[]) AS c(id, floor_id, head_ctid)
         JOIN %1$s t ON t.id = c.id
         WHERE %3$s
           -- OFFSET 0 keeps this a per-row subplan: pulled up into an anti join, the planner
           -- may leave p.id >= c.floor_id as a join filter and walk the poisoned rows again.
           AND NOT EXISTS (SELECT 1 FROM %1$s p
                           WHERE p.%2$I = t.%2$I AND p.id >= c.floor_id AND p.id < t.id
                             AND p.sent_at IS NULL AND p.attempt_count < $2
                           OFFSET 0)
         FOR UPDATE OF t SKIP LOCKED) t',
      v_table, p_q.partition_column, v_due)
      INTO v_ids, v_claimed_keys, v_claimed_ctids USING v_heads, p_q.max_attempts, v_floors, v_ctids;

    IF v_ids IS NOT NULL THEN
      v_all := v_all || v_ids;
      v_remaining := v_remaining - pg_catalog.cardinality(v_ids);
      IF p_mode = 'lease' THEN
        EXECUTE pg_catalog.format(
          'UPDATE %s SET lease_token = pg_catalog.gen_random_uuid(), leased_until = pg_catalog.now() + $2
           WHERE id = ANY ($1)', v_table)
          USING v_ids, p_lease;
        UPDATE outbox.partition_heads h SET parked_until = pg_catalog.now() + p_lease
        WHERE h.ctid = ANY (v_claimed_ctids);
      END IF;
    END IF;

    -- Heads that pointed at a row that is no longer (or not yet) the partition's deliverable head.
    SELECT pg_catalog.array_agg(k) INTO v_stale
    FROM pg_catalog.unnest(v_keys) AS k
    WHERE k <> ALL (COALESCE(v_claimed_keys, '{}'));
    EXIT WHEN v_stale IS NULL;
    PERFORM outbox._refresh_heads(p_q, v_stale);
    EXIT WHEN v_remaining <= 0;
  END LOOP;
  RETURN v_all;
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- Raises the package's argument error: SQLSTATE 22023, message '<function>: <what is wrong>'.
-- Every validation goes through here so that codes and message shapes stay one API.
CREATE OR REPLACE FUNCTION outbox._invalid(p_function text, p_message text)
RETURNS void
LANGUAGE plpgsql
IMMUTABLE
SET search_path = ''
AS $$
BEGIN
  RAISE EXCEPTION '%: %', p_function, p_message USING ERRCODE = '22023';
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- The registry row of a queue, or SQLSTATE 42P01 naming the queue when it is not registered.
CREATE OR REPLACE FUNCTION outbox._queue(p_function text, p_queue text)
RETURNS outbox.queues
LANGUAGE plpgsql
STABLE
SET search_path = ''
AS $$
DECLARE
  v_name text := outbox._queue_name(p_function, p_queue);
  v_row outbox.queues;
BEGIN
  SELECT * INTO v_row FROM outbox.queues q WHERE q.queue = v_name;
  IF NOT FOUND THEN
    RAISE EXCEPTION '%: queue % is not registered (call outbox.create_queue first)', p_function, v_name
      USING ERRCODE = '42P01';
  END IF;
  RETURN v_row;
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- Classifies every index of a queue table that covers pending rows (predicate sent_at IS NULL):
-- 'partition' = (<partition column>, id), 'claim' = (attempt_count, id), anything else 'decoy'.
-- check_indexes and create_queue both read this, so they never disagree.
CREATE OR REPLACE FUNCTION outbox._queue_indexes(p_table regclass, p_partition_column text)
RETURNS TABLE(index_name text, role text, definition text, valid boolean)
LANGUAGE sql
STABLE
SET search_path = ''
AS $$
  SELECT c.relname::text,
         CASE
           WHEN cols = ARRAY[p_partition_column, 'id'] THEN 'partition'
           WHEN cols = ARRAY['attempt_count', 'id'] THEN 'claim'
           ELSE 'decoy'
         END,
         pg_catalog.pg_get_indexdef(i.indexrelid),
         i.indisvalid AND i.indisready
  FROM pg_catalog.pg_index i
  JOIN pg_catalog.pg_class c ON c.oid = i.indexrelid
  CROSS JOIN LATERAL (
    SELECT pg_catalog.array_agg(
             CASE WHEN k.attnum = 0 THEN '(expression)' ELSE a.attname::text END ORDER BY k.ord) AS cols
    FROM pg_catalog.unnest(i.indkey::int2[]) WITH ORDINALITY AS k(attnum, ord)
    LEFT JOIN pg_catalog.pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.attnum
  ) kc
  WHERE i.indrelid = p_table
    AND i.indpred IS NOT NULL
    AND pg_catalog.pg_get_expr(i.indpred, i.indrelid) ~ '\msent_at IS NULL\M'
    AND pg_catalog.pg_get_expr(i.indpred, i.indrelid) !~ '\mOR\M';
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- Canonical 'schema.table' for a queue argument. Only plain names are accepted (letters, digits,
-- underscores; folded to lower case like unquoted SQL); an unqualified name means schema public.
CREATE OR REPLACE FUNCTION outbox._queue_name(p_function text, p_queue text)
RETURNS text
LANGUAGE plpgsql
IMMUTABLE
SET search_path = ''
AS $$
DECLARE
  v_parts text[];
BEGIN
  IF p_queue IS NULL THEN
    PERFORM outbox._invalid(p_function, 'queue must not be NULL');
  END IF;
  IF p_queue !~ '^[A-Za-z_][A-Za-z0-9_]{0,62}(\.[A-Za-z_][A-Za-z0-9_]{0,62})?$' THEN
    PERFORM outbox._invalid(p_function, pg_catalog.format(
      'queue must be a plain name "schema.table" (letters, digits, _), got %L', p_queue));
  END IF;
  v_parts := pg_catalog.string_to_array(pg_catalog.lower(p_queue), '.');
  IF pg_catalog.array_length(v_parts, 1) = 1 THEN
    v_parts := ARRAY['public', v_parts[1]];
  END IF;
  RETURN v_parts[1] || '.' || v_parts[2];
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- Recomputes the partition heads of a queue from its pending rows (after adoption, or after an
-- operator changed rows by hand): every head is dropped and made again, floors from 0, the same way
-- heads come back after a crash (_restore_heads). Partitions with no deliverable row lose their
-- head. Marks the heads complete.
CREATE OR REPLACE FUNCTION outbox._rebuild_heads(p_queue_id integer)
RETURNS void
LANGUAGE plpgsql
VOLATILE
SET search_path = ''
AS $$
DECLARE
  v_q outbox.queues;
BEGIN
  SELECT * INTO STRICT v_q FROM outbox.queues q WHERE q.queue_id = p_queue_id;
  DELETE FROM outbox.partition_heads h WHERE h.queue_id = p_queue_id;
  DELETE FROM outbox.partition_heads_built b WHERE b.queue_id = p_queue_id;
  PERFORM outbox._restore_heads(v_q);
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
BEGIN
  EXECUTE pg_catalog.format(
    'WITH input AS (
       SELECT u.id, u.token, u.outcome, u.err
       FROM unnest($1::bigint[], $2::uuid[], $3::text[], $4::text[]) AS u(id, token, outcome, err)),
     decided AS (
       SELECT i.*, CASE
                WHEN i.outcome = ''sent'' THEN NULL
                WHEN i.outcome = ''permanent'' AND $5 = ''poison'' THEN $6
                ELSE LEAST(t.attempt_count + 1, $7) END AS attempts
       FROM input i JOIN %1$s t ON t.id = i.id),
     upd AS (
       UPDATE %1$s t SET
         sent_at = CASE WHEN d.outcome = ''sent'' THEN pg_catalog.now() END,
         attempt_count = COALESCE(d.attempts, t.attempt_count),
         next_attempt_at = CASE
           WHEN d.outcome = ''sent'' THEN t.next_attempt_at
           WHEN d.attempts >= $6 THEN NULL
           ELSE pg_catalog.now() + outbox._backoff(d.attempts, $8, $9) END,
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
          p_q.backoff_min, p_q.backoff_max;

  IF p_q.partition_column IS NOT NULL AND v_keys IS NOT NULL THEN
    PERFORM outbox._refresh_heads(p_q, pg_catalog.array_remove(v_keys, NULL));
  END IF;
  RETURN COALESCE(v_done, '{}');
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- Points the head of each given partition at its first deliverable row (the smallest id at or above
-- the partition's floor among unsent, not poisoned rows), parked until that row's lease or backoff
-- ends; creates missing heads. The caller must have written its own changes in an earlier
-- statement, so they are visible here.
-- A partition found empty loses its head, and a partition whose head search stepped over poisoned
-- rows gets its floor raised past them, but only under the partition's advisory lock (slot
-- hashtext(key) & 1023 of lock space 1885823232 + queue_id, see tg_queue__heads) taken
-- exclusively (try, never wait) and after a second look with a newer snapshot: a producer in
-- flight holds that lock shared, so its uncommitted rows never lose their head. When the lock is
-- busy an empty head (head_id NULL) is parked for a second and looked at again by a later claim.
CREATE OR REPLACE FUNCTION outbox._refresh_heads(p_q outbox.queues, p_keys text[])
RETURNS void
LANGUAGE plpgsql
VOLATILE
SET search_path = ''
SET enable_seqscan = off
SET enable_hashjoin = off
SET enable_mergejoin = off
SET enable_bitmapscan = off
SET enable_material = off
SET plan_cache_mode = force_generic_plan
SET jit = off
AS $$
DECLARE
  v_next constant text := pg_catalog.format(
    'SELECT k.key, n.id, n.attempt_count, fl.floor_id, fl.has_head,
            NULLIF(GREATEST(n.next_attempt_at, n.leased_until, pg_catalog.now()), pg_catalog.now()) AS parked,
            n.id IS NULL OR n.id > fl.floor_id AND EXISTS (
              SELECT 1 FROM %1$s s WHERE s.%2$I = k.key::%3$s AND s.sent_at IS NULL
                AND s.id >= fl.floor_id AND s.id < n.id) AS tidy
     FROM pg_catalog.unnest($1::text[]) AS k(key)
     CROSS JOIN LATERAL (
       SELECT COALESCE(x.floor_id, 0) AS floor_id, x.floor_id IS NOT NULL AS has_head
       FROM (SELECT (SELECT h.floor_id FROM outbox.partition_heads h
                     WHERE h.queue_id = $3 AND h.partition_key = k.key) AS floor_id) x) fl
     LEFT JOIN LATERAL (
       SELECT t.id, t.attempt_count, t.next_attempt_at, t.leased_until
       FROM %1$s t
       WHERE t.%2$I = k.key::%3$s AND t.sent_at IS NULL AND t.attempt_count < $2 AND t.id >= fl.floor_id
       ORDER BY t.id LIMIT 1) n ON true',
    p_q.table_oid::regclass, p_q.partition_column, p_q.partition_type);
  v_tidy text[];
  v_locked text[];
  v_busy text[];
BEGIN
  IF p_keys IS NULL OR pg_catalog.cardinality(p_keys) = 0 THEN
    RETURN;
  END IF;
  -- Point heads at their next row; partitions that are empty or stepped over poisoned rows are
  -- only collected here, so the common uncontended case writes each of them once, below.
  EXECUTE pg_catalog.format(
    'WITH next AS (%s),
     upd AS (
       INSERT INTO outbox.partition_heads AS h (queue_id, partition_key, head_id, attempt_count, parked_until)
       SELECT $3, next.key, next.id, next.attempt_count, next.parked
       FROM next WHERE next.id IS NOT NULL AND NOT next.tidy
       ON CONFLICT (queue_id, partition_key) DO UPDATE
         SET head_id = EXCLUDED.head_id, attempt_count = EXCLUDED.attempt_count,
             parked_until = EXCLUDED.parked_until)
     SELECT pg_catalog.array_agg(next.key ORDER BY next.key) FROM next WHERE next.tidy', v_next)
    INTO v_tidy USING p_keys, p_q.max_attempts, p_q.queue_id;
  IF v_tidy IS NULL THEN
    RETURN;
  END IF;

  SELECT pg_catalog.array_agg(k) INTO v_locked
  FROM pg_catalog.unnest(v_tidy) AS k
  WHERE pg_catalog.pg_try_advisory_xact_lock(1885823232 + p_q.queue_id, pg_catalog.hashtext(k) & 1023);
  SELECT pg_catalog.array_agg(k) INTO v_busy
  FROM pg_catalog.unnest(v_tidy) AS k
  WHERE k <> ALL (COALESCE(v_locked, '{}'));

  -- Lock busy (a producer of the partition is in flight): point the head at what we found, the
  -- floor stays; an empty head is parked for a second and looked at again by a later claim.
  IF v_busy IS NOT NULL THEN
    EXECUTE pg_catalog.format(
      'WITH next AS (%s)
       INSERT INTO outbox.partition_heads AS h (queue_id, partition_key, head_id, attempt_count, parked_until)
       SELECT $3, next.key, next.id, COALESCE(next.attempt_count, 0),
              CASE WHEN next.id IS NULL THEN pg_catalog.now() + interval ''1 second'' ELSE next.parked END
       FROM next WHERE next.id IS NOT NULL OR next.has_head
       ON CONFLICT (queue_id, partition_key) DO UPDATE
         SET head_id = EXCLUDED.head_id, attempt_count = EXCLUDED.attempt_count,
             parked_until = EXCLUDED.parked_until', v_next)
      USING v_busy, p_q.max_attempts, p_q.queue_id;
  END IF;
  IF v_locked IS NULL THEN
    RETURN;
  END IF;

  -- Under the exclusive lock, with a newer snapshot (rows committed before the lock are visible):
  -- delete empty heads, raise floors past poisoned rows.
  EXECUTE pg_catalog.format(
    'WITH next AS (%s),
     gone AS (
       DELETE FROM outbox.partition_heads h USING next
       WHERE next.id IS NULL AND h.queue_id = $3 AND h.partition_key = next.key)
     INSERT INTO outbox.partition_heads AS h (queue_id, partition_key, head_id, attempt_count, parked_until, floor_id)
     SELECT $3, next.key, next.id, next.attempt_count, next.parked, next.id
     FROM next WHERE next.id IS NOT NULL
     ON CONFLICT (queue_id, partition_key) DO UPDATE
       SET head_id = EXCLUDED.head_id, attempt_count = EXCLUDED.attempt_count,
           parked_until = EXCLUDED.parked_until, floor_id = EXCLUDED.floor_id', v_next)
    USING v_locked, p_q.max_attempts, p_q.queue_id;
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- Brings back the partition heads of a queue after crash recovery (or a standby's promotion)
-- emptied the unlogged heads tables: every partition with pending rows gets its head again.
-- Heads producers made since then are kept (upsert). Runs once per queue: the first claim takes
-- the queue's rebuild lock, looks again, and rebuilds; concurrent claims wait for it.
CREATE OR REPLACE FUNCTION outbox._restore_heads(p_q outbox.queues)
RETURNS void
LANGUAGE plpgsql
VOLATILE
SET search_path = ''
AS $$
DECLARE
  v_keys text[];
BEGIN
  PERFORM pg_catalog.pg_advisory_xact_lock(1885823232 + p_q.queue_id, -1);
  IF EXISTS (SELECT 1 FROM outbox.partition_heads_built b WHERE b.queue_id = p_q.queue_id) THEN
    RETURN;
  END IF;
  EXECUTE pg_catalog.format(
    'SELECT pg_catalog.array_agg(DISTINCT %I::text) FROM %s WHERE sent_at IS NULL AND attempt_count < $1',
    p_q.partition_column, p_q.table_oid::regclass)
    INTO v_keys USING p_q.max_attempts;
  UPDATE outbox.partition_heads h SET floor_id = 0 WHERE h.queue_id = p_q.queue_id;
  PERFORM outbox._refresh_heads(p_q, v_keys);
  INSERT INTO outbox.partition_heads_built (queue_id) VALUES (p_q.queue_id) ON CONFLICT DO NOTHING;
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
-- Empty when the queue's indexes over pending rows are exactly the required ones. Otherwise one row
-- per problem: 'missing' (a required index), 'decoy' (any other index over sent_at IS NULL: the
-- plan the planner picks when statistics are stale and the queue is deep), 'invalid' (a failed
-- concurrent build).
CREATE OR REPLACE FUNCTION outbox.check_indexes(queue text)
RETURNS TABLE(problem text, index_name text, detail text)
LANGUAGE plpgsql
STABLE
SET search_path = ''
AS $$
DECLARE
  v_q outbox.queues := outbox._queue('check_indexes', queue);
  v_table regclass := v_q.table_oid::regclass;
BEGIN
  RETURN QUERY
  SELECT 'missing', NULL::text, pg_catalog.format('CREATE INDEX ON %s (%s) WHERE sent_at IS NULL', v_table, r.cols)
  -- quote_ident, not format('%I'): an unpartitioned queue has no partition column (NULL).
  FROM (VALUES ('partition', pg_catalog.quote_ident(v_q.partition_column) || ', id'),
               ('claim', 'attempt_count, id')) AS r(role, cols)
  WHERE (r.role = 'claim' OR v_q.partition_column IS NOT NULL)
    AND NOT EXISTS (SELECT 1 FROM outbox._queue_indexes(v_table, v_q.partition_column) x
                    WHERE x.role = r.role AND x.valid)
  UNION ALL
  SELECT 'decoy', x.index_name, x.definition
  FROM outbox._queue_indexes(v_table, v_q.partition_column) x
  WHERE x.role = 'decoy' OR (x.role = 'partition' AND v_q.partition_column IS NULL)
  UNION ALL
  SELECT 'invalid', x.index_name, x.definition
  FROM outbox._queue_indexes(v_table, v_q.partition_column) x
  WHERE NOT x.valid;
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- Lease mode: leases up to batch_size deliverable rows for `lease`, each with its own fresh
-- lease_token, in one short transaction. Results come back through apply_result(s) and count only
-- while the token still matches. Order: attempt_count, id (fresh rows overtake retried ones).
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
BEGIN
  PERFORM outbox._check_batch_size(fn, batch_size);
  PERFORM outbox._check_lease(fn, lease);
  IF v_q.partition_column IS NULL THEN
    -- One statement: pick, lease and return (each EXECUTE is planned anew, so fewer is faster).
    RETURN QUERY EXECUTE pg_catalog.format(
      'WITH leased AS (
         UPDATE %1$s t SET lease_token = pg_catalog.gen_random_uuid(), leased_until = pg_catalog.now() + $3
         WHERE t.id = ANY (ARRAY(
           SELECT s.id FROM %1$s s
           WHERE s.sent_at IS NULL AND s.attempt_count < $2
             AND (s.next_attempt_at IS NULL OR s.next_attempt_at <= pg_catalog.now())
             AND (s.leased_until IS NULL OR s.leased_until <= pg_catalog.now())
           ORDER BY s.attempt_count, s.id LIMIT $1
           FOR UPDATE SKIP LOCKED))
         RETURNING t.id, t.event_type, t.payload, NULL::text, t.attempt_count, t.lease_token, t.leased_until,
                   t.created_at)
       SELECT * FROM leased ORDER BY 5, 1', v_q.table_oid::regclass)
      USING batch_size, v_q.max_attempts, lease;
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
  v_ids := outbox._claim(v_q, batch_size, NULL, 'lock');
  v_setting := 'pgdrain.held_' || v_q.queue_id;
  -- SKIP LOCKED does not skip this transaction's own locks: a row it already holds (claimed by an
  -- earlier claim_locked and not yet settled) would be handed out a second time.
  v_ids := ARRAY(SELECT x FROM pg_catalog.unnest(v_ids) x
                 WHERE x <> ALL (COALESCE(pg_catalog.string_to_array(
                   NULLIF(pg_catalog.current_setting(v_setting, true), ''), ',')::bigint[], '{}')));
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
-- Creates (or adopts) the queue table, exactly the two required partial indexes, the NOTIFY trigger
-- and, for a partitioned queue, the trigger that keeps outbox.partition_heads; then registers the
-- queue. Idempotent: calling it again with new settings updates them; the partition column can not
-- change. An adopted table keeps its rows; missing lease columns are added as NULL = "free".
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
  v_sequence text;
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

  SELECT * INTO v_old FROM outbox.queues q WHERE q.queue = v_name;
  IF FOUND AND v_old.partition_column IS DISTINCT FROM v_col THEN
    PERFORM outbox._invalid(fn, pg_catalog.format(
      'partition_column of registered queue %s is %s and can not change to %s (drop_queue first)',
      v_name, COALESCE(v_old.partition_column, 'NULL'), COALESCE(v_col, 'NULL')));
  END IF;

  IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_namespace n WHERE n.nspname = v_schema) THEN
    RAISE EXCEPTION '%: schema % does not exist', fn, v_schema USING ERRCODE = '3F000';
  END IF;
  v_rel := pg_catalog.to_regclass(pg_catalog.format('%I.%I', v_schema, v_table));

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

  INSERT INTO outbox.queues AS q (queue, table_oid, partition_column, partition_type, max_attempts,
                                  backoff_min, backoff_max, permanent_policy, channel)
  VALUES (v_name, v_rel, v_col, v_type, create_queue.max_attempts, create_queue.backoff_min,
          create_queue.backoff_max, create_queue.permanent_policy, v_channel)
  ON CONFLICT ON CONSTRAINT queues_queue_key DO UPDATE
    SET max_attempts = EXCLUDED.max_attempts, backoff_min = EXCLUDED.backoff_min,
        backoff_max = EXCLUDED.backoff_max, permanent_policy = EXCLUDED.permanent_policy,
        channel = EXCLUDED.channel, table_oid = EXCLUDED.table_oid
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

  -- Producers write with a plain INSERT (RETURNING id is common); the heads trigger runs as owner.
  IF EXISTS (SELECT 1 FROM pg_catalog.pg_roles r WHERE r.rolname = 'pgdrain_producer') THEN
    EXECUTE pg_catalog.format('GRANT INSERT, SELECT (id) ON %s TO pgdrain_producer', v_rel);
    v_sequence := pg_catalog.pg_get_serial_sequence(v_rel::text, 'id');
    IF v_sequence IS NOT NULL THEN
      EXECUTE pg_catalog.format('GRANT USAGE ON SEQUENCE %s TO pgdrain_producer', v_sequence);
    END IF;
  END IF;

  EXECUTE pg_catalog.format('DROP TRIGGER IF EXISTS pgdrain_notify ON %s', v_rel);
  EXECUTE pg_catalog.format(
    'CREATE TRIGGER pgdrain_notify AFTER INSERT ON %s FOR EACH STATEMENT
       EXECUTE FUNCTION outbox.tg_queue__notify(%L, %L)', v_rel, v_channel, v_name);
  EXECUTE pg_catalog.format('DROP TRIGGER IF EXISTS pgdrain_heads ON %s', v_rel);
  IF v_col IS NOT NULL THEN
    EXECUTE pg_catalog.format(
      'CREATE TRIGGER pgdrain_heads AFTER INSERT ON %s REFERENCING NEW TABLE AS pgdrain_new_rows
         FOR EACH STATEMENT EXECUTE FUNCTION outbox.tg_queue__heads(%s, %L)', v_rel, v_queue_id, v_col);
    -- Rows that were pending before adoption need their partition heads too (a registered
    -- queue already has them, kept up to date by the trigger).
    IF v_old.queue_id IS NULL THEN
      PERFORM outbox._rebuild_heads(v_queue_id);
    END IF;
  END IF;
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- Unregisters a queue: removes its triggers, partition heads and registry row; with
-- drop_table = true also drops the table. The indexes stay with the table.
CREATE OR REPLACE FUNCTION outbox.drop_queue(queue text, drop_table boolean DEFAULT false)
RETURNS void
LANGUAGE plpgsql
VOLATILE
SET search_path = ''
AS $$
DECLARE
  fn constant text := 'drop_queue';
  v_q outbox.queues := outbox._queue(fn, queue);
BEGIN
  IF drop_table IS NULL THEN
    PERFORM outbox._invalid(fn, 'drop_table must not be NULL');
  END IF;
  DELETE FROM outbox.partition_heads h WHERE h.queue_id = v_q.queue_id;
  DELETE FROM outbox.partition_heads_built b WHERE b.queue_id = v_q.queue_id;
  DELETE FROM outbox.queues q WHERE q.queue_id = v_q.queue_id;
  IF drop_table THEN
    EXECUTE pg_catalog.format('DROP TABLE %s', v_q.table_oid::regclass);
  ELSE
    EXECUTE pg_catalog.format('DROP TRIGGER IF EXISTS pgdrain_notify ON %s', v_q.table_oid::regclass);
    EXECUTE pg_catalog.format('DROP TRIGGER IF EXISTS pgdrain_heads ON %s', v_q.table_oid::regclass);
  END IF;
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- Convenience insert; a plain INSERT into the queue table is equally valid (the triggers do the
-- rest). partition_key is required on a partitioned queue and refused on an unpartitioned one.
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
    EXECUTE pg_catalog.format('INSERT INTO %s (event_type, payload, %I) VALUES ($1, $2, $3::%s) RETURNING id',
                              v_q.table_oid::regclass, v_q.partition_column, v_q.partition_type)
      INTO v_id USING enqueue.event_type, enqueue.payload, enqueue.partition_key;
  END IF;
  RETURN v_id;
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- Heartbeat: moves leased_until to now() + lease while lease_token still matches and returns it;
-- NULL (and nothing changed) when the lease is no longer ours.
CREATE OR REPLACE FUNCTION outbox.extend_lease(queue text, id bigint, lease_token uuid, lease interval)
RETURNS timestamptz
LANGUAGE plpgsql
VOLATILE
SET search_path = ''
AS $$
DECLARE
  fn constant text := 'extend_lease';
  v_q outbox.queues := outbox._queue(fn, queue);
  v_until timestamptz;
  v_key text;
BEGIN
  IF extend_lease.id IS NULL THEN
    PERFORM outbox._invalid(fn, 'id must not be NULL');
  END IF;
  IF extend_lease.lease_token IS NULL THEN
    PERFORM outbox._invalid(fn, 'lease_token must not be NULL');
  END IF;
  PERFORM outbox._check_lease(fn, lease);
  EXECUTE pg_catalog.format(
    'UPDATE %s t SET leased_until = pg_catalog.now() + $3
     WHERE t.id = $1 AND t.lease_token = $2 AND t.sent_at IS NULL
     RETURNING t.leased_until, %s',
    v_q.table_oid::regclass,
    CASE WHEN v_q.partition_column IS NULL THEN 'NULL::text'
         ELSE pg_catalog.format('t.%I::text', v_q.partition_column) END)
    INTO v_until, v_key USING extend_lease.id, extend_lease.lease_token, lease;
  IF v_key IS NOT NULL THEN
    UPDATE outbox.partition_heads h SET parked_until = v_until
    WHERE h.queue_id = v_q.queue_id AND h.partition_key = v_key AND h.head_id = extend_lease.id;
  END IF;
  RETURN v_until;
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- Retention: deletes at most max_rows rows sent more than older_than ago, oldest ids first, in one
-- short statement (SKIP LOCKED, so it never waits for a drainer). Call it repeatedly until it
-- returns 0; each call is its own small transaction when called outside one.
CREATE OR REPLACE FUNCTION outbox.purge_sent(queue text, older_than interval DEFAULT '7 days', max_rows integer DEFAULT 10000)
RETURNS bigint
LANGUAGE plpgsql
VOLATILE
SET search_path = ''
AS $$
DECLARE
  fn constant text := 'purge_sent';
  v_q outbox.queues := outbox._queue(fn, queue);
  v_count bigint;
BEGIN
  IF older_than IS NULL OR older_than < interval '0' THEN
    PERFORM outbox._invalid(fn, pg_catalog.format(
      'older_than must be 0 or more, got %s', COALESCE(older_than::text, 'NULL')));
  END IF;
  IF max_rows IS NULL OR max_rows < 1 OR max_rows > 1000000 THEN
    PERFORM outbox._invalid(fn, pg_catalog.format(
      'max_rows must be between 1 and 1000000, got %s', COALESCE(max_rows::text, 'NULL')));
  END IF;
  EXECUTE pg_catalog.format(
    'WITH del AS (
       DELETE FROM %1$s t WHERE t.id = ANY (ARRAY(
         SELECT s.id FROM %1$s s WHERE s.sent_at < pg_catalog.now() - $1
         ORDER BY s.id LIMIT $2 FOR UPDATE SKIP LOCKED))
       RETURNING 1)
     SELECT pg_catalog.count(*) FROM del', v_q.table_oid::regclass)
    INTO v_count USING older_than, max_rows;
  RETURN v_count;
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- Gives a leased row back untouched: lease and token cleared, no attempt counted, claimable at
-- once. false (and nothing changed) when the lease is no longer ours.
CREATE OR REPLACE FUNCTION outbox.release(queue text, id bigint, lease_token uuid)
RETURNS boolean
LANGUAGE plpgsql
VOLATILE
SET search_path = ''
AS $$
DECLARE
  fn constant text := 'release';
  v_q outbox.queues := outbox._queue(fn, queue);
  v_found boolean;
  v_key text;
BEGIN
  IF release.id IS NULL THEN
    PERFORM outbox._invalid(fn, 'id must not be NULL');
  END IF;
  IF release.lease_token IS NULL THEN
    PERFORM outbox._invalid(fn, 'lease_token must not be NULL');
  END IF;
  EXECUTE pg_catalog.format(
    'UPDATE %s t SET leased_until = NULL, lease_token = NULL
     WHERE t.id = $1 AND t.lease_token = $2 AND t.sent_at IS NULL
     RETURNING true, %s',
    v_q.table_oid::regclass,
    CASE WHEN v_q.partition_column IS NULL THEN 'NULL::text'
         ELSE pg_catalog.format('t.%I::text', v_q.partition_column) END)
    INTO v_found, v_key USING release.id, release.lease_token;
  IF v_key IS NOT NULL THEN
    PERFORM outbox._refresh_heads(v_q, ARRAY[v_key]);
  END IF;
  IF v_found THEN
    -- The row is claimable now: wake an idle drainer rather than leave it to the next poll.
    PERFORM pg_catalog.pg_notify(v_q.channel, v_q.queue);
  END IF;
  RETURN COALESCE(v_found, false);
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- Operator: gives poisoned rows (all of them, or the given ids) a fresh start: attempt_count 0,
-- due now, last_error kept for the record. Returns how many rows were requeued. On a partitioned
-- queue their partitions' heads move back to them, so per-key order holds again.
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
  v_keys text[];
BEGIN
  IF ids IS NOT NULL AND pg_catalog.array_position(ids, NULL) IS NOT NULL THEN
    PERFORM outbox._invalid(fn, 'ids must not contain NULL');
  END IF;
  EXECUTE pg_catalog.format(
    'WITH upd AS (
       UPDATE %s t SET attempt_count = 0, next_attempt_at = NULL, leased_until = NULL, lease_token = NULL
       WHERE t.sent_at IS NULL AND t.attempt_count >= $1 AND ($2::bigint[] IS NULL OR t.id = ANY ($2))
       RETURNING %s AS key)
     SELECT pg_catalog.count(*), pg_catalog.array_agg(DISTINCT upd.key) FROM upd',
    v_q.table_oid::regclass,
    CASE WHEN v_q.partition_column IS NULL THEN 'NULL::text'
         ELSE pg_catalog.format('t.%I::text', v_q.partition_column) END)
    INTO v_count, v_keys USING v_q.max_attempts, ids;
  IF v_q.partition_column IS NOT NULL THEN
    -- The requeued rows may lie below their partitions' floors: search those partitions from 0.
    UPDATE outbox.partition_heads h SET floor_id = 0
    FROM pg_catalog.unnest(v_keys) AS k
    WHERE h.queue_id = v_q.queue_id AND h.partition_key = k;
    PERFORM outbox._refresh_heads(v_q, pg_catalog.array_remove(v_keys, NULL));
  END IF;
  IF v_count > 0 THEN
    PERFORM pg_catalog.pg_notify(v_q.channel, v_q.queue);
  END IF;
  RETURN v_count;
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- Lock mode: records outcomes for rows this transaction claimed with claim_locked and still holds.
-- Refuses (SQLSTATE 55000, nothing changed) any id this transaction does not hold: the id must be
-- in claim_locked's list for this transaction and its row lock must be this transaction's. Returns how
-- many rows were recorded. A settled row leaves the held set, so it is recorded at most once per
-- claim: settling it again is refused like any row not held (else a second 'transient' would count
-- a second attempt).
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
    -- too (claim_locked's FOR UPDATE leaves this transaction's xid in xmax).
    EXECUTE pg_catalog.format(
      'SELECT x FROM pg_catalog.unnest($1::bigint[]) AS x LEFT JOIN %s t ON t.id = x
       WHERE t.xmax IS DISTINCT FROM pg_catalog.pg_current_xact_id()::xid LIMIT 1', v_q.table_oid::regclass)
      INTO v_foreign USING ids;
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
-- One row of gauges for metrics. Exact counts from one pass over the pending rows through the
-- (attempt_count, id) partial index: cost follows the pending backlog, never the sent history.
-- pending = unsent and not poisoned; ready = pending, due and not leased; leased = lease live;
-- backing_off = pending with next_attempt_at in the future; poisoned = attempt_count >= max.
CREATE OR REPLACE FUNCTION outbox.stats(queue text)
RETURNS TABLE(pending bigint, ready bigint, leased bigint, backing_off bigint, poisoned bigint,
              oldest_pending_at timestamptz, oldest_pending_age interval)
LANGUAGE plpgsql
STABLE
SET search_path = ''
SET enable_seqscan = off
SET jit = off
AS $$
DECLARE
  v_q outbox.queues := outbox._queue('stats', queue);
BEGIN
  RETURN QUERY EXECUTE pg_catalog.format(
    'SELECT pg_catalog.count(*) FILTER (WHERE t.attempt_count < $1),
            pg_catalog.count(*) FILTER (WHERE t.attempt_count < $1
                               AND (t.next_attempt_at IS NULL OR t.next_attempt_at <= pg_catalog.now())
                               AND (t.leased_until IS NULL OR t.leased_until <= pg_catalog.now())),
            pg_catalog.count(*) FILTER (WHERE t.attempt_count < $1 AND t.leased_until > pg_catalog.now()),
            pg_catalog.count(*) FILTER (WHERE t.attempt_count < $1 AND t.next_attempt_at > pg_catalog.now()),
            pg_catalog.count(*) FILTER (WHERE t.attempt_count >= $1),
            pg_catalog.min(t.created_at) FILTER (WHERE t.attempt_count < $1),
            pg_catalog.now() - pg_catalog.min(t.created_at) FILTER (WHERE t.attempt_count < $1)
     FROM %s t WHERE t.sent_at IS NULL AND t.attempt_count >= 0', v_q.table_oid::regclass)
    USING v_q.max_attempts;
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- Statement-level AFTER INSERT trigger of a partitioned queue: makes sure every key written by the
-- statement has a row in outbox.partition_heads, so claims never walk blocked successors.
-- It first takes the partitions' advisory locks SHARED (see below) until this
-- transaction ends: producers never block each other, and nobody deletes a head or raises a floor
-- over rows that are not committed yet. No tuple is written for a key that already has a head.
-- The partition lock: advisory lock (1885823232 + queue_id, hashtext(key) & 1023), i.e. 1024 slots
-- per queue, so a 10,000-key insert takes at most 1024 locks and the lock table does not overflow.
-- Arguments: queue_id, partition column.
CREATE OR REPLACE FUNCTION outbox.tg_queue__heads()
RETURNS trigger
LANGUAGE plpgsql
SET search_path = ''
SET enable_seqscan = off
SET enable_hashjoin = off
SET enable_mergejoin = off
SET enable_bitmapscan = off
SET enable_material = off
SET plan_cache_mode = force_generic_plan
SET jit = off
AS $$
DECLARE
  v_queue_id integer := TG_ARGV[0]::integer;
  v_keys text[];
  v_ids bigint[];
  v_new_keys text[];
  v_new_ids bigint[];
  v_low_keys text[];
  v_low_ids bigint[];
  v_low record;
BEGIN
  EXECUTE pg_catalog.format(
    'SELECT pg_catalog.array_agg(k ORDER BY k), pg_catalog.array_agg(min_id ORDER BY k)
       FROM (SELECT %I::text AS k, pg_catalog.min(id) AS min_id
               FROM pgdrain_new_rows WHERE sent_at IS NULL GROUP BY 1) s', TG_ARGV[1])
    INTO v_keys, v_ids;
  IF v_keys IS NULL THEN
    PERFORM pg_catalog.set_config('pgdrain.quiet_' || TG_RELID, 'on', true);
    RETURN NULL;
  END IF;

  PERFORM pg_catalog.pg_advisory_xact_lock_shared(1885823232 + v_queue_id, s.slot)
  FROM (SELECT DISTINCT pg_catalog.hashtext(k) & 1023 AS slot
        FROM pg_catalog.unnest(v_keys) AS k ORDER BY 1) s;

  -- One index probe per key finds the keys with no head yet and the heads whose floor was raised
  -- past our rows (the raiser could not see them yet); both are rare, and only they are written.
  SELECT pg_catalog.array_agg(u.k) FILTER (WHERE h.floor_id IS NULL),
         pg_catalog.array_agg(u.id) FILTER (WHERE h.floor_id IS NULL),
         pg_catalog.array_agg(u.k) FILTER (WHERE h.floor_id > u.id),
         pg_catalog.array_agg(u.id) FILTER (WHERE h.floor_id > u.id)
    INTO v_new_keys, v_new_ids, v_low_keys, v_low_ids
  FROM unnest(v_keys, v_ids) AS u(k, id)
  -- LATERAL: a probe on both key columns per key, whatever the statistics of the heads table say
  -- (a join may scan every head of the queue when they were last analyzed while it was empty).
  LEFT JOIN LATERAL (SELECT x.floor_id FROM outbox.partition_heads x
                     WHERE x.queue_id = v_queue_id AND x.partition_key = u.k) h ON true;

  -- New heads, in key order, never waiting on a committed one (DO NOTHING takes no lock). A key
  -- whose head another producer made meanwhile may carry a floor above our rows: lowered below.
  IF v_new_keys IS NOT NULL THEN
    WITH ins AS (
      INSERT INTO outbox.partition_heads (queue_id, partition_key, head_id, floor_id)
      SELECT v_queue_id, u.k, u.id, u.id
      FROM unnest(v_new_keys, v_new_ids) AS u(k, id)
      ORDER BY u.k
      ON CONFLICT (queue_id, partition_key) DO NOTHING
      RETURNING partition_key)
    SELECT pg_catalog.array_cat(v_low_keys, pg_catalog.array_agg(u.k)),
           pg_catalog.array_cat(v_low_ids, pg_catalog.array_agg(u.id))
      INTO v_low_keys, v_low_ids
    FROM unnest(v_new_keys, v_new_ids) AS u(k, id)
    WHERE u.k NOT IN (SELECT ins.partition_key FROM ins);
  END IF;

  -- Tell pgdrain_notify (fired next) whether this statement made any partition claimable.
  PERFORM pg_catalog.set_config('pgdrain.quiet_' || TG_RELID,
                                CASE WHEN v_new_keys IS NULL THEN 'on' ELSE 'off' END, true);

  -- Rows that got their ids before a floor was raised past them (the raiser could not see them
  -- yet): lower the floor so the head search finds them. Rare; one key at a time in key order, so
  -- two producers never lock the same heads in opposite orders.
  IF v_low_keys IS NOT NULL THEN
    FOR v_low IN
      SELECT u.k, pg_catalog.min(u.id) AS id FROM unnest(v_low_keys, v_low_ids) AS u(k, id)
      GROUP BY u.k ORDER BY u.k
    LOOP
      UPDATE outbox.partition_heads h SET floor_id = v_low.id
      WHERE h.queue_id = v_queue_id AND h.partition_key = v_low.k AND h.floor_id > v_low.id;
    END LOOP;
  END IF;
  RETURN NULL;
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- Statement-level AFTER INSERT trigger: one NOTIFY per statement (PostgreSQL folds identical
-- notifications of one transaction into one), never one per row. On a partitioned queue it stays
-- quiet when the statement only added rows behind existing partition heads (pgdrain_heads fires
-- first and says so): those rows become claimable when their head is done, and the drainer that
-- finishes the head claims again at once. NOTIFY takes a cluster-wide lock at commit, so skipping
-- it is what keeps many concurrent producers of busy keys from queueing behind each other.
-- Arguments: channel, queue name (the payload).
CREATE OR REPLACE FUNCTION outbox.tg_queue__notify()
RETURNS trigger
LANGUAGE plpgsql
SET search_path = ''
AS $$
BEGIN
  IF pg_catalog.current_setting('pgdrain.quiet_' || TG_RELID, true) = 'on' THEN
    RETURN NULL;
  END IF;
  PERFORM pg_catalog.pg_notify(TG_ARGV[0], TG_ARGV[1]);
  RETURN NULL;
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- The max_partitions partitions whose oldest pending row is older than older_than, oldest first,
-- with their head and why it is not moving. Reads outbox.partition_heads, so its cost follows the
-- number of partitions with pending work, not the backlog.
CREATE OR REPLACE FUNCTION outbox.wedged_partitions(queue text, older_than interval, max_partitions integer DEFAULT 10)
RETURNS TABLE(partition_key text, head_id bigint, head_attempt_count integer, head_last_error text,
              oldest_pending_at timestamptz, pending bigint, reason text)
LANGUAGE plpgsql
STABLE
SET search_path = ''
AS $$
DECLARE
  fn constant text := 'wedged_partitions';
  v_q outbox.queues := outbox._queue(fn, queue);
BEGIN
  IF v_q.partition_column IS NULL THEN
    PERFORM outbox._invalid(fn, pg_catalog.format('queue %s has no partition column', v_q.queue));
  END IF;
  IF older_than IS NULL OR older_than < interval '0' THEN
    PERFORM outbox._invalid(fn, pg_catalog.format(
      'older_than must be 0 or more, got %s', COALESCE(older_than::text, 'NULL')));
  END IF;
  IF max_partitions IS NULL OR max_partitions < 1 OR max_partitions > 10000 THEN
    PERFORM outbox._invalid(fn, pg_catalog.format(
      'max_partitions must be between 1 and 10000, got %s', COALESCE(max_partitions::text, 'NULL')));
  END IF;
  RETURN QUERY EXECUTE pg_catalog.format(
    'SELECT h.partition_key, t.id, t.attempt_count, t.last_error, t.created_at,
            (SELECT pg_catalog.count(*) FROM %1$s p WHERE p.%2$I = t.%2$I AND p.sent_at IS NULL AND p.attempt_count < $2),
            CASE
              WHEN t.leased_until > pg_catalog.now() THEN ''leased until '' || t.leased_until
              WHEN t.next_attempt_at > pg_catalog.now() THEN ''backing off until '' || t.next_attempt_at
                   || '' after '' || t.attempt_count || '' attempts''
              ELSE ''ready, waiting for a drainer'' END
     FROM outbox.partition_heads h
     JOIN %1$s t ON t.id = h.head_id
     WHERE h.queue_id = $1 AND t.created_at < pg_catalog.now() - $3
     ORDER BY t.created_at
     LIMIT $4', v_q.table_oid::regclass, v_q.partition_column)
    USING v_q.queue_id, v_q.max_attempts, older_than, max_partitions;
END;
$$;
-- +goose StatementEnd

-- +goose Down
-- +goose StatementBegin
DROP SCHEMA outbox CASCADE;
-- +goose StatementEnd
