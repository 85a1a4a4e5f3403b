-- +goose Up
-- +goose StatementBegin
-- 00004 nothing stuck: schema changes

-- What outbox.repair fixed, per queue and cause: a counter that should stay at zero. Anything here
-- is a bug of pgdrain's derived state that became a bounded delay instead of a lost event.
CREATE TABLE outbox.repairs (
  queue text NOT NULL,
  cause text NOT NULL,
  repairs bigint NOT NULL,
  last_repair_at timestamptz NOT NULL,
  PRIMARY KEY (queue, cause)
);
COMMENT ON TABLE outbox.repairs IS
  'Repairs of partition heads made by outbox.repair, counted per queue and cause (should stay empty).';

-- The sequence a queue's ids come from (identity, serial, or a DEFAULT nextval of a sequence that
-- need not be OWNED BY the column), found by create_queue (outbox._id_sequence); the commit step
-- renumbers late rows with it. Required for partitioned queues registered by 00004's create_queue;
-- NULL for a queue registered earlier whose id has no such sequence.
ALTER TABLE outbox.queues ADD COLUMN id_sequence regclass;
COMMENT ON COLUMN outbox.queues.id_sequence IS
  'The ascending sequence the queue table''s id comes from (for renumbering late rows at commit); NULL = none.';
-- +goose StatementEnd

-- +goose StatementBegin
-- An array argument must be one-dimensional (or empty, or NULL: other checks decide about those).
-- A multidimensional array would be flattened by unnest() and refused by array_position() with a
-- raw 0A000, so it is refused here, naming the argument. Takes array_ndims() of the argument, so
-- one function serves arrays of every type.
CREATE OR REPLACE FUNCTION outbox._check_one_dimension(p_function text, p_argument text, p_ndims integer)
RETURNS void
LANGUAGE plpgsql
IMMUTABLE
SET search_path = ''
AS $$
BEGIN
  IF p_ndims > 1 THEN
    PERFORM outbox._invalid(p_function, pg_catalog.format(
      '%s must be a one-dimensional array, got %s dimensions', p_argument, p_ndims));
  END IF;
END;
$$;
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
-- The sequence a queue table's id comes from, or NULL: the identity's sequence, or the one sequence
-- a default of exactly nextval('that_sequence') uses (serial, or a sequence that is not OWNED BY the
-- column: found through the default's dependency in pg_depend, which pg_get_serial_sequence does not
-- follow). Only an ascending sequence counts. The commit step renumbers late rows with nextval of
-- it (outbox.queues.id_sequence), so a partitioned queue needs one (create_queue refuses otherwise).
CREATE OR REPLACE FUNCTION outbox._id_sequence(p_rel regclass)
RETURNS regclass
LANGUAGE plpgsql
STABLE
SET search_path = ''
AS $$
DECLARE
  v_attnum smallint;
  v_identity "char";
  v_seq regclass;
  v_expr text;
BEGIN
  SELECT a.attnum, a.attidentity INTO v_attnum, v_identity
  FROM pg_catalog.pg_attribute a
  WHERE a.attrelid = p_rel AND a.attname = 'id' AND NOT a.attisdropped;
  IF NOT FOUND THEN
    RETURN NULL;
  END IF;
  IF v_identity <> '' THEN
    v_seq := pg_catalog.pg_get_serial_sequence(p_rel::text, 'id')::regclass;
  ELSE
    SELECT d.refobjid::regclass, pg_catalog.pg_get_expr(ad.adbin, ad.adrelid) INTO v_seq, v_expr
    FROM pg_catalog.pg_attrdef ad
    JOIN pg_catalog.pg_depend d ON d.classid = 'pg_catalog.pg_attrdef'::regclass AND d.objid = ad.oid
                               AND d.refclassid = 'pg_catalog.pg_class'::regclass
    JOIN pg_catalog.pg_class s ON s.oid = d.refobjid AND s.relkind = 'S'
    WHERE ad.adrelid = p_rel AND ad.adnum = v_attnum
    ORDER BY d.refobjid
    LIMIT 1;
    -- Anything but a bare nextval of it (nextval(...) * 2, coalesce of two sequences) does not
    -- give ids in the sequence's order.
    IF v_expr IS DISTINCT FROM pg_catalog.format('nextval(%L::regclass)', v_seq::text) THEN
      v_seq := NULL;
    END IF;
  END IF;
  IF v_seq IS NOT NULL AND NOT EXISTS (
      SELECT 1 FROM pg_catalog.pg_sequence s WHERE s.seqrelid = v_seq AND s.seqincrement > 0) THEN
    v_seq := NULL;
  END IF;
  RETURN v_seq;
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- Returns the first of p_ids whose row this transaction does not hold FOR UPDATE, NULL when it holds
-- them all. Ownership comes from the row lock, never from a setting the caller could write.
-- Fast path: xmax is this transaction's own top-level xid (claimed at the top level). Otherwise
-- (claimed in a savepoint: xmax is the subtransaction's xid, or a MultiXact when the transaction
-- also holds a weaker lock on the row or rolled back an update of it) the rows are locked again,
-- FOR UPDATE SKIP LOCKED: a row another transaction holds is skipped; a row this transaction already
-- holds (top level, live or released savepoint) comes back and its xmax stays as it was; a row
-- nobody holds (never locked, its savepoint rolled back, or its holder ended between the two reads)
-- is locked now and gets a new xmax. So a row is ours when it comes back with the xmax it had
-- before. A lock taken here for a row that is not ours ends with the error the caller then raises.
-- Never waits; under REPEATABLE READ a row updated since the snapshot fails with 40001.
CREATE OR REPLACE FUNCTION outbox._locked_here(p_table regclass, p_ids bigint[])
RETURNS bigint
LANGUAGE plpgsql
VOLATILE
SET search_path = ''
AS $$
DECLARE
  v_before text[];
  v_locked bigint[];
  v_foreign bigint;
BEGIN
  EXECUTE pg_catalog.format(
    'SELECT pg_catalog.array_agg(t.xmax::text ORDER BY u.ord)
     FROM pg_catalog.unnest($1::bigint[]) WITH ORDINALITY AS u(id, ord) LEFT JOIN %s t ON t.id = u.id', p_table)
    INTO v_before USING p_ids;
  IF pg_catalog.array_position(v_before, NULL) IS NULL
     AND v_before <@ ARRAY[pg_catalog.pg_current_xact_id_if_assigned()::xid::text] THEN
    RETURN NULL;
  END IF;
  EXECUTE pg_catalog.format(
    'SELECT pg_catalog.array_agg(t.id) FROM (SELECT s.id FROM %s s WHERE s.id = ANY ($1) FOR UPDATE SKIP LOCKED) t',
    p_table)
    INTO v_locked USING p_ids;
  -- A new statement reads the row headers as they are now (xmax is not versioned by the snapshot;
  -- the locking statement itself returns the values it read before locking).
  EXECUTE pg_catalog.format(
    'SELECT u.id FROM unnest($1::bigint[], $2::text[]) WITH ORDINALITY AS u(id, xmax_before, ord)
     LEFT JOIN %s t ON t.id = u.id
     WHERE u.id <> ALL ($3) OR t.xmax IS NULL OR t.xmax::text IS DISTINCT FROM u.xmax_before
     ORDER BY u.ord LIMIT 1', p_table)
    INTO v_foreign USING p_ids, v_before, COALESCE(v_locked, '{}');
  RETURN v_foreign;
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- Notes rows this transaction wrote to a partitioned queue (a producer's INSERT, through
-- tg_queue__heads, or requeue_poisoned moving rows to the tail of their keys) for its commit step.
-- It takes the partitions' advisory locks SHARED until the transaction ends (producers never block
-- each other, and no claim deletes a head or raises a floor over rows that are not committed yet),
-- merges the keys with the smallest and largest id of each into transaction-local settings (a rolled
-- back savepoint takes its keys with it, like its rows), and, once per transaction, queues the
-- commit step (outbox.tg_queue__commit) by inserting a row into outbox.commit_hooks.
-- The partition lock: advisory lock (1885823232 + queue_id, hashtext(key) & 1023), i.e. 1024 slots
-- per queue, so a 10,000-key insert takes at most 1024 locks and the lock table does not overflow.
CREATE OR REPLACE FUNCTION outbox._note_written(p_queue_id integer, p_table oid, p_keys text[], p_mins bigint[],
                                                p_maxs bigint[])
RETURNS void
LANGUAGE plpgsql
VOLATILE
SET search_path = ''
SET jit = off
AS $$
DECLARE
  v_setting constant text := 'pgdrain.commit_' || p_table;
  v_keys text[] := p_keys;
  v_mins bigint[] := p_mins;
  v_maxs bigint[] := p_maxs;
  v_queues text;
BEGIN
  -- Rows that become claimable do so at commit, where the commit step sends the NOTIFY.
  PERFORM pg_catalog.set_config('pgdrain.quiet_' || p_table, 'on', true);
  PERFORM pg_catalog.pg_advisory_xact_lock_shared(1885823232 + p_queue_id, s.slot)
  FROM (SELECT DISTINCT pg_catalog.hashtext(k) & 1023 AS slot
        FROM pg_catalog.unnest(v_keys) AS k ORDER BY 1) s;

  -- Merge with the keys of this transaction's earlier statements. The settings are transaction
  -- local, so a rolled back savepoint takes its keys with it, like its rows.
  IF pg_catalog.current_setting(v_setting || '_keys', true) <> '' THEN
    SELECT pg_catalog.array_agg(k ORDER BY k), pg_catalog.array_agg(lo ORDER BY k),
           pg_catalog.array_agg(hi ORDER BY k)
      INTO v_keys, v_mins, v_maxs
    FROM (SELECT u.k, pg_catalog.min(u.lo) AS lo, pg_catalog.max(u.hi) AS hi
          FROM (SELECT * FROM unnest(v_keys, v_mins, v_maxs)
                UNION ALL
                SELECT * FROM unnest(
                  pg_catalog.current_setting(v_setting || '_keys')::text[],
                  pg_catalog.current_setting(v_setting || '_mins')::bigint[],
                  pg_catalog.current_setting(v_setting || '_maxs')::bigint[])) AS u(k, lo, hi)
          GROUP BY u.k) s;
  END IF;
  PERFORM pg_catalog.set_config(v_setting || '_keys', v_keys::text, true),
          pg_catalog.set_config(v_setting || '_mins', v_mins::text, true),
          pg_catalog.set_config(v_setting || '_maxs', v_maxs::text, true);

  v_queues := COALESCE(NULLIF(pg_catalog.current_setting('pgdrain.commit_queues', true), ''), '{}');
  IF NOT p_table::text = ANY (v_queues::text[]) THEN
    PERFORM pg_catalog.set_config('pgdrain.commit_queues',
                                  (v_queues::text[] || p_table::text)::text, true);
  END IF;
  -- The first statement of the transaction queues the commit step: a row in outbox.commit_hooks,
  -- whose deferred constraint trigger fires at COMMIT. The pending trigger event is on that table,
  -- not on the queue table, so DDL and TRUNCATE of the queue in the same transaction still work.
  -- Armed before the insert: under SET CONSTRAINTS ... IMMEDIATE the hook's trigger fires at the end
  -- of that INSERT, runs the commit step for what is noted so far and disarms, so the next statement
  -- queues it again.
  IF pg_catalog.current_setting('pgdrain.commit_armed', true) IS DISTINCT FROM 'on' THEN
    PERFORM pg_catalog.set_config('pgdrain.commit_armed', 'on', true);
    INSERT INTO outbox.commit_hooks DEFAULT VALUES;
  END IF;
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- When a claim should next be tried on a queue although no NOTIFY arrives: the earliest end of a
-- lease or backoff that parks work (a time at or before now() means "claim now"), or NULL when
-- nothing is parked. A worker that sleeps until then (or a NOTIFY) never waits for its poll
-- fallback. Partitioned queues: the parked heads, one index probe (a head parked empty for a
-- second while a producer of its key commits is included, so that row is not left waiting).
-- Unpartitioned queues: the first 1,000 pending rows in claim order, through the claim index
-- (bounded; rows further back are found by the claim that follows).
CREATE OR REPLACE FUNCTION outbox.next_due(queue text)
RETURNS timestamptz
LANGUAGE plpgsql
STABLE
SET search_path = ''
SET enable_seqscan = off
SET jit = off
AS $$
DECLARE
  v_q outbox.queues := outbox._queue('next_due', queue);
  v_at timestamptz;
BEGIN
  IF v_q.partition_column IS NOT NULL THEN
    SELECT h.parked_until INTO v_at FROM outbox.partition_heads h
    WHERE h.queue_id = v_q.queue_id AND h.parked_until IS NOT NULL
    ORDER BY h.parked_until LIMIT 1;
    RETURN v_at;
  END IF;
  EXECUTE pg_catalog.format(
    'SELECT pg_catalog.min(GREATEST(s.next_attempt_at, s.leased_until))
     FROM (SELECT t.next_attempt_at, t.leased_until FROM %s t
           WHERE t.sent_at IS NULL AND t.attempt_count < $1
           ORDER BY t.attempt_count, t.id LIMIT 1000) s', v_q.table_oid::regclass)
    INTO v_at USING v_q.max_attempts;
  RETURN v_at;
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- A queue's registration as the drainers need it, so that a worker reads it through a function
-- granted to pgdrain_worker instead of needing SELECT on outbox.queues. Errors like every function
-- (42P01) when the queue is not registered.
CREATE OR REPLACE FUNCTION outbox.queue_info(queue text)
RETURNS TABLE(queue_name text, partition_column text, max_attempts integer, backoff_min interval,
              backoff_max interval, permanent_policy text, channel text)
LANGUAGE plpgsql
STABLE
SET search_path = ''
AS $$
DECLARE
  v_q outbox.queues := outbox._queue('queue_info', queue);
BEGIN
  RETURN QUERY SELECT v_q.queue, v_q.partition_column, v_q.max_attempts, v_q.backoff_min, v_q.backoff_max,
                      v_q.permanent_policy, v_q.channel;
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- Finds the pending deliverable rows of a partitioned queue that no claim can reach, and (unless
-- dry_run) makes them reachable again. Partition heads, floors and parks are a cache of the queue
-- table (outbox.partition_heads); this checks the cache against the table, one key at a time:
--   missing_head     the key has a deliverable row but no head: no claim would ever look at it;
--   floor_above_row  the head's floor (below it, everything is taken to be sent or poisoned) is above
--                    the key's first deliverable row: that row would never be found;
--   parked_past_due  the head is parked (lease or backoff) more than a second past the time its first
--                    deliverable row is due.
-- Every fix moves the cache the safe way (a head is made or pointed at the first deliverable row, a
-- floor lowered, a park ended): a claim re-checks every head against the table, so a fix that
-- raced another session is harmless. Heads locked by a claim right now are skipped (their claim
-- refreshes them). Cost: one walk over the distinct keys with unsent rows (a skip scan of the
-- partition index) plus, per key, its poisoned rows in front of its first deliverable one: it grows
-- with partitions, not with rows. One repair per queue at a time (advisory lock (1885823232 +
-- queue_id, -3), tried, never waited for: a second caller returns nothing).
-- Every problem is returned (and, when fixed, raised as a WARNING for the server log and counted in
-- outbox.repairs); an empty result means the cache was right. Unpartitioned queues keep no cache.
CREATE OR REPLACE FUNCTION outbox.repair(queue text, dry_run boolean DEFAULT false)
RETURNS TABLE(partition_key text, cause text, head_id bigint, detail text)
LANGUAGE plpgsql
VOLATILE
SET search_path = ''
SET enable_seqscan = off
SET enable_bitmapscan = off
SET enable_hashjoin = off
SET enable_mergejoin = off
SET jit = off
AS $$
DECLARE
  fn constant text := 'repair';
  v_q outbox.queues := outbox._queue(fn, queue);
  v_now timestamptz := pg_catalog.clock_timestamp();
  r record;
BEGIN
  IF dry_run IS NULL THEN
    PERFORM outbox._invalid(fn, 'dry_run must not be NULL');
  END IF;
  IF v_q.partition_column IS NULL
     OR NOT pg_catalog.pg_try_advisory_xact_lock(1885823232 + v_q.queue_id, -3)
     -- Not built yet (after a crash): the next claim rebuilds every head anyway.
     OR NOT EXISTS (SELECT 1 FROM outbox.partition_heads_built b WHERE b.queue_id = v_q.queue_id) THEN
    RETURN;
  END IF;

  FOR r IN EXECUTE pg_catalog.format(
    'WITH RECURSIVE keys(k) AS (
       (SELECT t.%2$I FROM %1$s t WHERE t.sent_at IS NULL ORDER BY t.%2$I LIMIT 1)
       UNION ALL
       SELECT (SELECT t.%2$I FROM %1$s t WHERE t.sent_at IS NULL AND t.%2$I > keys.k ORDER BY t.%2$I LIMIT 1)
       FROM keys WHERE keys.k IS NOT NULL)
     SELECT s.key, s.cause, s.head_id, s.row_id, s.detail FROM (
       SELECT keys.k::text AS key, h.head_id, f.id AS row_id,
              CASE WHEN h.queue_id IS NULL THEN ''missing_head''
                   WHEN h.floor_id > f.id THEN ''floor_above_row''
                   WHEN h.parked_until > f.due + interval ''1 second'' THEN ''parked_past_due'' END AS cause,
              CASE WHEN h.queue_id IS NULL THEN pg_catalog.format(''row %%s has no partition head'', f.id)
                   WHEN h.floor_id > f.id THEN pg_catalog.format(''floor %%s is above row %%s'', h.floor_id, f.id)
                   ELSE pg_catalog.format(''head parked until %%s, row %%s due at %%s'', h.parked_until, f.id, f.due)
              END AS detail
       FROM keys
       CROSS JOIN LATERAL (
         SELECT t.id, GREATEST(t.next_attempt_at, t.leased_until, $3) AS due FROM %1$s t
         WHERE t.%2$I = keys.k AND t.sent_at IS NULL AND t.attempt_count < $2
         ORDER BY t.id LIMIT 1) f
       LEFT JOIN outbox.partition_heads h ON h.queue_id = $1 AND h.partition_key = keys.k::text
       WHERE keys.k IS NOT NULL) s
     WHERE s.cause IS NOT NULL
     ORDER BY s.key',
    v_q.table_oid::regclass, v_q.partition_column)
    USING v_q.queue_id, v_q.max_attempts, v_now
  LOOP
    IF NOT dry_run THEN
      IF r.cause = 'missing_head' THEN
        INSERT INTO outbox.partition_heads AS h (queue_id, partition_key, head_id, floor_id)
        VALUES (v_q.queue_id, r.key, r.row_id, r.row_id)
        ON CONFLICT ON CONSTRAINT partition_heads_pkey DO NOTHING;
      ELSE
        UPDATE outbox.partition_heads h
        SET head_id = r.row_id, parked_until = NULL, floor_id = LEAST(h.floor_id, r.row_id)
        WHERE h.ctid = (SELECT x.ctid FROM outbox.partition_heads x
                        WHERE x.queue_id = v_q.queue_id AND x.partition_key = r.key
                        FOR NO KEY UPDATE SKIP LOCKED);
      END IF;
      CONTINUE WHEN NOT FOUND;
      RAISE WARNING 'pgdrain repair: queue %, partition %: % (%)', v_q.queue, r.key, r.cause, r.detail;
      INSERT INTO outbox.repairs AS c (queue, cause, repairs, last_repair_at)
      VALUES (v_q.queue, r.cause, 1, v_now)
      ON CONFLICT ON CONSTRAINT repairs_pkey DO UPDATE SET repairs = c.repairs + 1, last_repair_at = EXCLUDED.last_repair_at;
    END IF;
    partition_key := r.key;
    cause := r.cause;
    head_id := r.head_id;
    detail := r.detail;
    RETURN NEXT;
  END LOOP;
  IF NOT dry_run AND FOUND THEN
    PERFORM pg_catalog.pg_notify(v_q.channel, v_q.queue);
  END IF;
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- Statement-level AFTER TRUNCATE trigger (pgdrain_truncate) of every queue table: the rows are
-- gone, so is everything derived from them. Deletes the queue's partition heads (they would point
-- at rows that no longer exist, with floors above the ids a RESTART IDENTITY hands out again) and
-- its clocks (they would make every later commit "late"), and forgets the keys this transaction
-- noted for its commit step (their rows went with the TRUNCATE). The built-mark stays: an empty
-- table's heads are complete. TRUNCATE holds ACCESS EXCLUSIVE until the transaction ends, so no
-- producer or claim of the table is in flight; a rolled back TRUNCATE takes these deletes with it.
-- The queue is found by the table (TG_RELID), not by an argument, so re-registration never leaves
-- the trigger pointing elsewhere.
CREATE OR REPLACE FUNCTION outbox.tg_queue__truncate()
RETURNS trigger
LANGUAGE plpgsql
VOLATILE
SET search_path = ''
AS $$
DECLARE
  v_setting constant text := 'pgdrain.commit_' || TG_RELID;
BEGIN
  DELETE FROM outbox.partition_heads h USING outbox.queues q
  WHERE q.table_oid = TG_RELID AND h.queue_id = q.queue_id;
  DELETE FROM outbox.partition_clocks c USING outbox.queues q
  WHERE q.table_oid = TG_RELID AND c.queue_id = q.queue_id;
  IF pg_catalog.current_setting(v_setting || '_keys', true) <> '' THEN
    PERFORM pg_catalog.set_config(v_setting || '_keys', '', true),
            pg_catalog.set_config(v_setting || '_mins', '', true),
            pg_catalog.set_config(v_setting || '_maxs', '', true);
  END IF;
  RETURN NULL;
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- Validates the parallel arrays of a batch of results: one-dimensional, same lengths, at most
-- 10000, no NULL or duplicate id, every outcome one of 'sent', 'transient', 'permanent'.
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
  PERFORM outbox._check_one_dimension(p_function, 'ids', pg_catalog.array_ndims(p_ids));
  PERFORM outbox._check_one_dimension(p_function, 'outcomes', pg_catalog.array_ndims(p_outcomes));
  PERFORM outbox._check_one_dimension(p_function, 'errors', pg_catalog.array_ndims(p_errors));
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
  -- Due and lease times against the clock, not now(): a claim in a transaction that began long ago
  -- must neither miss what has become due since nor hand out a lease that has already run out.
  v_now timestamptz := pg_catalog.clock_timestamp();
  v_due constant text := 't.sent_at IS NULL AND t.attempt_count < $2
    AND (t.next_attempt_at IS NULL OR t.next_attempt_at <= $now)
    AND (t.leased_until IS NULL OR t.leased_until <= $now)';
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
  v_until timestamptz;
  -- Lock mode: rows this transaction already holds from an earlier claim_locked. SKIP LOCKED does
  -- not skip our own locks, so without excluding them before the LIMIT they would take the places
  -- of rows that can still be claimed.
  v_held bigint[] := CASE WHEN p_mode = 'lock' THEN COALESCE(pg_catalog.string_to_array(NULLIF(
    pg_catalog.current_setting('pgdrain.held_' || p_q.queue_id, true), ''), ',')::bigint[], '{}') ELSE '{}' END;
BEGIN
  IF p_q.partition_column IS NULL THEN
    EXECUTE pg_catalog.format(
      'SELECT pg_catalog.array_agg(id) FROM (
         SELECT t.id FROM %s t WHERE %s AND t.id <> ALL ($4)
         ORDER BY t.attempt_count, t.id LIMIT $1 FOR UPDATE SKIP LOCKED) s',
      v_table, pg_catalog.replace(v_due, '$now', '$3'))
      INTO v_all USING p_batch_size, p_q.max_attempts, v_now, v_held;
    v_all := COALESCE(v_all, '{}');
    IF p_mode = 'lease' AND pg_catalog.cardinality(v_all) > 0 THEN
      EXECUTE pg_catalog.format(
        'UPDATE %s SET lease_token = pg_catalog.gen_random_uuid(), leased_until = $2
         WHERE id = ANY ($1)', v_table)
        USING v_all, pg_catalog.clock_timestamp() + p_lease;
    END IF;
    RETURN v_all;
  END IF;

  IF NOT EXISTS (SELECT 1 FROM outbox.partition_heads_built b WHERE b.queue_id = p_q.queue_id) THEN
    PERFORM outbox._restore_heads(p_q);
  END IF;
  -- Keys this very transaction wrote get their heads at its commit; a claim in the same
  -- transaction (a test, a script) makes them now.
  IF pg_catalog.current_setting('pgdrain.commit_' || p_q.table_oid || '_keys', true) <> '' THEN
    PERFORM outbox._refresh_heads(p_q,
      pg_catalog.current_setting('pgdrain.commit_' || p_q.table_oid || '_keys')::text[]);
  END IF;

  -- Wake parked heads whose lease or backoff has ended, oldest first, a bounded number per call.
  -- By ctid: a TID scan touches exactly these heads whatever the statistics say.
  UPDATE outbox.partition_heads h SET parked_until = NULL
  WHERE h.ctid = ANY (ARRAY(
    SELECT w.ctid FROM outbox.partition_heads w
    WHERE w.queue_id = p_q.queue_id AND w.parked_until <= v_now
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
            AND (h.head_id IS NULL OR h.head_id <> ALL (v_all || v_held))
          ORDER BY h.attempt_count, h.head_id
          LIMIT v_remaining
          FOR NO KEY UPDATE SKIP LOCKED) s;
    EXIT WHEN v_keys IS NULL;

    EXECUTE pg_catalog.format(
      'SELECT pg_catalog.array_agg(t.id), pg_catalog.array_agg(t.%2$I::text), pg_catalog.array_agg(t.head_ctid)
       FROM (
         SELECT t.id, t.%2$I, c.head_ctid
         FROM unnest($1::bigint[], $3::bigint[], $4::tid[], $5::text[]) AS c(id, floor_id, head_ctid, key)
         -- A head must point at a row of its own partition (heads of new keys come from settings a
         -- producer could forge); one that does not is stale and refreshed below.
         JOIN %1$s t ON t.id = c.id AND t.%2$I = c.key::%4$s
         WHERE %3$s
           -- OFFSET 0 keeps this a per-row subplan: pulled up into an anti join, the planner
           -- may leave p.id >= c.floor_id as a join filter and walk the poisoned rows again.
           AND NOT EXISTS (SELECT 1 FROM %1$s p
                           WHERE p.%2$I = t.%2$I AND p.id >= c.floor_id AND p.id < t.id
                             AND p.sent_at IS NULL AND p.attempt_count < $2
                           OFFSET 0)
         FOR UPDATE OF t SKIP LOCKED) t',
      v_table, p_q.partition_column, pg_catalog.replace(v_due, '$now', '$6'), p_q.partition_type)
      INTO v_ids, v_claimed_keys, v_claimed_ctids USING v_heads, p_q.max_attempts, v_floors, v_ctids, v_keys, v_now;

    IF v_ids IS NOT NULL THEN
      v_all := v_all || v_ids;
      v_remaining := v_remaining - pg_catalog.cardinality(v_ids);
      IF p_mode = 'lease' THEN
        v_until := pg_catalog.clock_timestamp() + p_lease;
        EXECUTE pg_catalog.format(
          'UPDATE %s SET lease_token = pg_catalog.gen_random_uuid(), leased_until = $2
           WHERE id = ANY ($1)', v_table)
          USING v_ids, v_until;
        UPDATE outbox.partition_heads h SET parked_until = v_until
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
-- Commit step of one partitioned queue for the current transaction (called by tg_queue__commit):
-- makes per-key delivery order equal commit order, and gives new keys their partition head.
--
-- 1. Takes the commit lock of every key hash the transaction wrote (hashtext(key) & 65535),
--    exclusively, in hash order, held until the commit is complete (advisory lock
--    (1885823232 + queue_id, 65536 + hash)); more than 256 hashes take the queue's whole commit
--    lock (objid -2) instead, so a bulk insert does not fill the lock table. Commits that share a
--    hash are serialised from here on; nothing else waits for these locks, so they can not deadlock.
-- 2. A key is late when a transaction that committed before us wrote a row of it (or of a key
--    with the same hash) with a larger id than our smallest: outbox.partition_clocks keeps
--    the largest committed id per hash, written only under these locks. A late key's rows of this
--    transaction get new ids from the id sequence, in their order, larger than every id already
--    given out: delivered order (id order) is then commit order. Not late (the usual case): no row
--    is written twice.
-- 3. Creates the heads of new keys (no waiting on producers: heads are created only here, under
--    the key's commit lock), wakes a head a claim left empty while we were open, and lowers a floor
--    that lies above our rows; NOTIFY when a partition became claimable.
-- 4. Raises the clocks to our largest ids.
--
-- Under REPEATABLE READ or SERIALIZABLE the clocks are read in the transaction's snapshot; when
-- another producer of the same hash committed after it started, raising the clock fails with
-- serialization_failure (40001), which those isolation levels already oblige the caller to retry.
CREATE OR REPLACE FUNCTION outbox._commit_partitions(p_q outbox.queues)
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
  v_setting constant text := 'pgdrain.commit_' || p_q.table_oid;
  v_keys text[] := NULLIF(pg_catalog.current_setting(v_setting || '_keys', true), '')::text[];
  v_mins bigint[] := NULLIF(pg_catalog.current_setting(v_setting || '_mins', true), '')::bigint[];
  v_maxs bigint[] := NULLIF(pg_catalog.current_setting(v_setting || '_maxs', true), '')::bigint[];
  v_renumbered boolean := false;
  v_issued bigint;
  v_sequence constant regclass := p_q.id_sequence;
  v_late text[];
  v_late_los bigint[];
  v_late_his bigint[];
  v_late_clocks bigint[];
  v_new text[];
  v_empty text[];
  v_low_keys text[];
  v_wrote boolean;
BEGIN
  PERFORM pg_catalog.set_config(v_setting || '_keys', '', true),
          pg_catalog.set_config(v_setting || '_mins', '', true),
          pg_catalog.set_config(v_setting || '_maxs', '', true);
  IF v_keys IS NULL THEN
    RETURN;
  END IF;

  IF pg_catalog.cardinality(v_keys) > 256
     AND (SELECT pg_catalog.count(DISTINCT pg_catalog.hashtext(k) & 65535) FROM pg_catalog.unnest(v_keys) AS k) > 256 THEN
    PERFORM pg_catalog.pg_advisory_xact_lock(1885823232 + p_q.queue_id, -2);
  ELSE
    PERFORM pg_catalog.pg_advisory_xact_lock_shared(1885823232 + p_q.queue_id, -2),
            pg_catalog.pg_advisory_xact_lock(1885823232 + p_q.queue_id, 65536 + s.slot)
    FROM (SELECT DISTINCT pg_catalog.hashtext(k) & 65535 AS slot FROM pg_catalog.unnest(v_keys) AS k ORDER BY 1) s;
  END IF;

  -- A new statement: in READ COMMITTED its snapshot sees every commit that released these locks.
  -- One probe per key of the clocks and the heads (LATERAL: index probes whatever the statistics
  -- of these small tables say). Late keys are renumbered, then probed again.
  LOOP
    SELECT pg_catalog.array_agg(u.k ORDER BY u.k) FILTER (WHERE c.committed_max > u.lo),
           pg_catalog.array_agg(u.lo ORDER BY u.k) FILTER (WHERE c.committed_max > u.lo),
           pg_catalog.array_agg(u.hi ORDER BY u.k) FILTER (WHERE c.committed_max > u.lo),
           pg_catalog.array_agg(c.committed_max ORDER BY u.k) FILTER (WHERE c.committed_max > u.lo),
           pg_catalog.array_agg(u.k ORDER BY u.k) FILTER (WHERE h.found IS NULL),
           pg_catalog.array_agg(u.k ORDER BY u.k) FILTER (WHERE h.found AND h.head_id IS NULL),
           pg_catalog.array_agg(u.k ORDER BY u.k) FILTER (WHERE h.floor_id > u.lo)
      INTO v_late, v_late_los, v_late_his, v_late_clocks, v_new, v_empty, v_low_keys
    FROM unnest(v_keys, v_mins, v_maxs) AS u(k, lo, hi)
    LEFT JOIN LATERAL (SELECT x.committed_max FROM outbox.partition_clocks x
                       WHERE x.queue_id = p_q.queue_id AND x.slot = pg_catalog.hashtext(u.k) & 65535) c ON true
    LEFT JOIN LATERAL (SELECT true AS found, x.head_id, x.floor_id FROM outbox.partition_heads x
                       WHERE x.queue_id = p_q.queue_id AND x.partition_key = u.k) h ON true;
    EXIT WHEN v_late IS NULL OR v_renumbered;
    SELECT pg_catalog.array_agg(u.k ORDER BY u.k),
           pg_catalog.array_agg(COALESCE(r.lo, u.lo) ORDER BY u.k),
           pg_catalog.array_agg(COALESCE(r.hi, u.hi) ORDER BY u.k)
      INTO v_keys, v_mins, v_maxs
    FROM unnest(v_keys, v_mins, v_maxs) AS u(k, lo, hi)
    LEFT JOIN outbox._renumber_late_rows(p_q, v_sequence, v_late, v_late_los, v_late_his, v_late_clocks) r
      ON r.k = u.k;
    v_renumbered := true;
  END LOOP;

  -- New keys get their heads, a head a claim left empty while we were open is woken, and a floor
  -- above our rows (ids given explicitly, which are not renumbered) is lowered: one upsert in key
  -- order. ON CONFLICT works on the head's latest version, so a head another session made or
  -- changed after our probe (a rebuild after a crash) is corrected too, not silently kept. NOTIFY
  -- when it wrote anything: a partition became claimable.
  IF v_new IS NOT NULL OR v_empty IS NOT NULL OR v_low_keys IS NOT NULL THEN
    WITH up AS (
      INSERT INTO outbox.partition_heads AS h (queue_id, partition_key, head_id, floor_id)
      SELECT p_q.queue_id, u.k, u.lo, u.lo
      FROM unnest(v_keys, v_mins) AS u(k, lo)
      WHERE u.k = ANY (v_new) OR u.k = ANY (v_empty) OR u.k = ANY (v_low_keys)
      ORDER BY u.k
      ON CONFLICT (queue_id, partition_key) DO UPDATE
        SET head_id = COALESCE(h.head_id, EXCLUDED.head_id),
            parked_until = CASE WHEN h.head_id IS NULL THEN NULL ELSE h.parked_until END,
            floor_id = LEAST(h.floor_id, EXCLUDED.floor_id)
        WHERE h.head_id IS NULL OR h.floor_id > EXCLUDED.floor_id
      RETURNING 1)
    SELECT EXISTS (SELECT 1 FROM up) INTO v_wrote;
    IF v_wrote THEN
      PERFORM pg_catalog.pg_notify(p_q.channel, p_q.queue);
    END IF;
  END IF;

  -- The keys and ids come from transaction-local settings, which a producer could forge: a clock
  -- is never raised above the last id the sequence gave out, so a forged one can not stop later
  -- commits from being renumbered.
  v_issued := pg_catalog.pg_sequence_last_value(v_sequence);
  INSERT INTO outbox.partition_clocks AS c (queue_id, slot, committed_max)
  SELECT p_q.queue_id, pg_catalog.hashtext(u.k) & 65535, LEAST(pg_catalog.max(u.hi), v_issued)
  FROM unnest(v_keys, v_maxs) AS u(k, hi)
  GROUP BY 2 ORDER BY 2
  ON CONFLICT (queue_id, slot) DO UPDATE
    SET committed_max = GREATEST(c.committed_max, EXCLUDED.committed_max);
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- The registry row of a queue, or SQLSTATE 42P01 naming the queue when it is not registered or its
-- table no longer exists (dropped outside drop_queue: every function would otherwise act on a stale
-- oid). One syscache probe, no catalog scan: it runs on every claim. The registration of a dropped
-- table stays until create_queue (which registers the new table and drops the old derived state)
-- or drop_queue.
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
  -- pg_table_is_visible is NULL exactly when no relation has this oid (a RELOID syscache probe).
  IF pg_catalog.pg_table_is_visible(v_row.table_oid) IS NULL THEN
    RAISE EXCEPTION '%: the table of queue % no longer exists (dropped outside outbox.drop_queue): '
                    'call outbox.create_queue to register it again, or outbox.drop_queue', p_function, v_name
      USING ERRCODE = '42P01';
  END IF;
  RETURN v_row;
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
SET search_path = ''
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
                ELSE LEAST(t.attempt_count + 1, $7) END AS attempts
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
-- Only READ COMMITTED gives the second look a newer snapshot: under REPEATABLE READ or SERIALIZABLE
-- every key counts as busy, so a head is never deleted nor a floor raised from an old snapshot.
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
            NULLIF(GREATEST(n.next_attempt_at, n.leased_until, $4), $4) AS parked,
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
  v_now timestamptz := pg_catalog.clock_timestamp();
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
    INTO v_tidy USING p_keys, p_q.max_attempts, p_q.queue_id, v_now;
  IF v_tidy IS NULL THEN
    RETURN;
  END IF;

  IF pg_catalog.current_setting('transaction_isolation') = 'read committed' THEN
    SELECT pg_catalog.array_agg(k) INTO v_locked
    FROM pg_catalog.unnest(v_tidy) AS k
    WHERE pg_catalog.pg_try_advisory_xact_lock(1885823232 + p_q.queue_id, pg_catalog.hashtext(k) & 1023);
  END IF;
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
              CASE WHEN next.id IS NULL THEN $4 + interval ''1 second'' ELSE next.parked END
       FROM next WHERE next.id IS NOT NULL OR next.has_head
       ON CONFLICT (queue_id, partition_key) DO UPDATE
         SET head_id = EXCLUDED.head_id, attempt_count = EXCLUDED.attempt_count,
             parked_until = EXCLUDED.parked_until', v_next)
      USING v_busy, p_q.max_attempts, p_q.queue_id, v_now;
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
    USING v_locked, p_q.max_attempts, p_q.queue_id, v_now;
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- Gives this transaction's pending rows of the late keys new ids from the queue's id sequence, in
-- their order, each larger than the key's clock (the largest committed id of its hash): delivered
-- order (id order) is then commit order (see outbox._commit_partitions). A sequence with CACHE > 1
-- hands this session values from its own cache, which may lie below ids other sessions already
-- committed: values not above the clock are drawn and dropped until one is (at most the cache
-- size; the clock never exceeds the sequence's last value, see the caller).
-- Skipped (the key keeps id order) only when the sequence is behind the clock, which means it was
-- set back by hand (setval, ALTER SEQUENCE RESTART): a new id must not collide with a later default.
-- Returns each renumbered key with its new smallest and largest id.
-- Arguments: the queue's id sequence (NULL: none), the late keys, and for each (aligned arrays)
-- this transaction's smallest and largest id and the key's clock as the caller read it.
CREATE OR REPLACE FUNCTION outbox._renumber_late_rows(p_q outbox.queues, p_sequence regclass, p_keys text[],
                                                      p_los bigint[], p_his bigint[], p_clocks bigint[])
RETURNS TABLE(k text, lo bigint, hi bigint)
LANGUAGE plpgsql
VOLATILE
SET search_path = ''
SET enable_seqscan = off
SET enable_bitmapscan = off
SET plan_cache_mode = force_generic_plan
SET jit = off
AS $$
DECLARE
  v_table regclass := p_q.table_oid::regclass;
  v_ids bigint[];
  v_old bigint;
  v_new bigint;
  i integer;
BEGIN
  IF p_sequence IS NULL THEN
    RETURN;
  END IF;
  FOR i IN 1..pg_catalog.cardinality(p_keys) LOOP
    CONTINUE WHEN COALESCE(pg_catalog.pg_sequence_last_value(p_sequence), 0) < p_clocks[i];

    EXECUTE pg_catalog.format(
      'SELECT pg_catalog.array_agg(t.id ORDER BY t.id) FROM %s t
       WHERE t.%I = $1::%s AND t.id BETWEEN $2 AND $3 AND t.sent_at IS NULL
         AND outbox._written_here(t.xmin)', v_table, p_q.partition_column, p_q.partition_type)
      INTO v_ids USING p_keys[i], p_los[i], p_his[i];
    CONTINUE WHEN v_ids IS NULL;

    k := p_keys[i];
    lo := NULL;
    v_new := pg_catalog.nextval(p_sequence);
    WHILE v_new <= p_clocks[i] LOOP
      v_new := pg_catalog.nextval(p_sequence);
    END LOOP;
    FOREACH v_old IN ARRAY v_ids LOOP
      IF v_old <> v_ids[1] THEN
        v_new := pg_catalog.nextval(p_sequence);
      END IF;
      EXECUTE pg_catalog.format('UPDATE %s SET id = $2 WHERE id = $1', v_table) USING v_old, v_new;
      lo := COALESCE(lo, v_new);
    END LOOP;
    hi := v_new;
    RETURN NEXT;
  END LOOP;
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- Brings back the partition heads of a queue after crash recovery (or a standby's promotion)
-- emptied the unlogged heads tables, or recomputes them (_rebuild_heads): every partition with
-- pending rows gets its head again, searched from floor 0.
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

  INSERT INTO outbox.queues AS q (queue, table_oid, partition_column, partition_type, max_attempts,
                                  backoff_min, backoff_max, permanent_policy, channel, id_sequence)
  VALUES (v_name, v_rel, v_col, v_type, create_queue.max_attempts, create_queue.backoff_min,
          create_queue.backoff_max, create_queue.permanent_policy, v_channel, v_sequence)
  ON CONFLICT ON CONSTRAINT queues_queue_key DO UPDATE
    SET max_attempts = EXCLUDED.max_attempts, backoff_min = EXCLUDED.backoff_min,
        backoff_max = EXCLUDED.backoff_max, permanent_policy = EXCLUDED.permanent_policy,
        channel = EXCLUDED.channel, table_oid = EXCLUDED.table_oid,
        partition_column = EXCLUDED.partition_column, partition_type = EXCLUDED.partition_type,
        id_sequence = EXCLUDED.id_sequence
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
  IF v_col IS NOT NULL THEN
    EXECUTE pg_catalog.format(
      'CREATE TRIGGER pgdrain_heads AFTER INSERT ON %s REFERENCING NEW TABLE AS pgdrain_new_rows
         FOR EACH STATEMENT EXECUTE FUNCTION outbox.tg_queue__heads(%s, %L)', v_rel, v_queue_id, v_col);
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
-- Unregisters a queue: removes its triggers, partition heads, built-mark, clocks and registry row;
-- with drop_table = true also drops the table. The indexes, CHECKs and grants stay with the table.
-- Works when the table is already gone (dropped outside drop_queue): then only the registration
-- and its derived state go.
CREATE OR REPLACE FUNCTION outbox.drop_queue(queue text, drop_table boolean DEFAULT false)
RETURNS void
LANGUAGE plpgsql
VOLATILE
SET search_path = ''
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
  DELETE FROM outbox.queues q WHERE q.queue_id = v_q.queue_id;
  IF v_rel IS NULL THEN
    RETURN;
  ELSIF drop_table THEN
    EXECUTE pg_catalog.format('DROP TABLE %s', v_rel);
  ELSE
    EXECUTE pg_catalog.format('DROP TRIGGER IF EXISTS pgdrain_notify ON %s', v_rel);
    EXECUTE pg_catalog.format('DROP TRIGGER IF EXISTS pgdrain_heads ON %s', v_rel);
    EXECUTE pg_catalog.format('DROP TRIGGER IF EXISTS pgdrain_truncate ON %s', v_rel);
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
-- Heartbeat: moves leased_until to clock_timestamp() + lease while lease_token still matches and
-- returns it; NULL (and nothing changed) when the lease is no longer ours. The clock, not now():
-- counted from the start of an older transaction the new lease could already be over.
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
    'UPDATE %s t SET leased_until = pg_catalog.clock_timestamp() + $3
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
-- The commit step of producers: the constraint trigger pgdrain_commit on outbox.commit_hooks
-- (DEFERRABLE INITIALLY DEFERRED), whose row outbox.tg_queue__heads inserts once per transaction,
-- so it fires once, at COMMIT, after the transaction's last statement. It hands every partitioned
-- queue the transaction wrote to outbox._commit_partitions in queue_id order: the commit locks of
-- all transactions are then taken in one global order, and committing transactions never deadlock.
-- SET CONSTRAINTS outbox.pgdrain_commit IMMEDIATE runs it earlier (its locks are then held until
-- the transaction ends); rows written after that queue it again.
CREATE OR REPLACE FUNCTION outbox.tg_queue__commit()
RETURNS trigger
LANGUAGE plpgsql
SET search_path = ''
SET jit = off
AS $$
DECLARE
  v_queues text := NULLIF(pg_catalog.current_setting('pgdrain.commit_queues', true), '');
  v_q outbox.queues;
BEGIN
  DELETE FROM outbox.commit_hooks h WHERE h.xid = pg_catalog.pg_current_xact_id();
  PERFORM pg_catalog.set_config('pgdrain.commit_armed', '', true),
          pg_catalog.set_config('pgdrain.commit_queues', '', true);
  IF v_queues IS NULL THEN
    RETURN NULL;
  END IF;
  FOR v_q IN
    SELECT * FROM outbox.queues q
    WHERE q.table_oid::text = ANY (v_queues::text[]) AND q.partition_column IS NOT NULL
      -- The transaction may have dropped the table it wrote: nothing of it is left to order.
      AND pg_catalog.pg_table_is_visible(q.table_oid) IS NOT NULL
    ORDER BY q.queue_id
  LOOP
    PERFORM outbox._commit_partitions(v_q);
  END LOOP;
  RETURN NULL;
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- Statement-level AFTER INSERT trigger of a partitioned queue: hands the statement's keys, with the
-- smallest and largest new id of each, to outbox._note_written, which takes the partitions' producer
-- locks and queues this transaction's commit step (ordering, renumbering, heads of new keys).
-- Nothing is written here: a producer never waits on another producer's uncommitted head.
-- Arguments: queue_id, partition column.
CREATE OR REPLACE FUNCTION outbox.tg_queue__heads()
RETURNS trigger
LANGUAGE plpgsql
SET search_path = ''
SET jit = off
AS $$
DECLARE
  v_queue_id integer := TG_ARGV[0]::integer;
  v_keys text[];
  v_mins bigint[];
  v_maxs bigint[];
BEGIN
  EXECUTE pg_catalog.format(
    'SELECT pg_catalog.array_agg(k ORDER BY k), pg_catalog.array_agg(lo ORDER BY k),
            pg_catalog.array_agg(hi ORDER BY k)
       FROM (SELECT %I::text AS k, pg_catalog.min(id) AS lo, pg_catalog.max(id) AS hi
               FROM pgdrain_new_rows WHERE sent_at IS NULL GROUP BY 1) s', TG_ARGV[1])
    INTO v_keys, v_mins, v_maxs;
  IF v_keys IS NULL THEN
    RETURN NULL;
  END IF;

  PERFORM outbox._note_written(v_queue_id, TG_RELID, v_keys, v_mins, v_maxs);
  RETURN NULL;
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- Queues registered before 00004 get what create_queue now gives a queue table (idempotent):
-- the TRUNCATE trigger (outbox.tg_queue__truncate drops the heads and clocks of a truncated table),
-- the producers' column privileges and CHECKs (outbox._guard_queue_table: NOT VALID, each read
-- only over pending rows), and their id sequence (outbox._id_sequence; NULL where there is none).
-- A registration whose table is already gone is left alone: every call on it now says so
-- (outbox._queue), and create_queue or drop_queue clears it.
DO $registration$
DECLARE
  v_q record;
BEGIN
  FOR v_q IN SELECT q.queue_id, q.table_oid::regclass AS rel, q.partition_column
             FROM outbox.queues q
             WHERE pg_catalog.pg_table_is_visible(q.table_oid) IS NOT NULL
             ORDER BY q.queue_id LOOP
    PERFORM outbox._guard_queue_table(v_q.rel, v_q.partition_column, true);
    UPDATE outbox.queues q SET id_sequence = outbox._id_sequence(v_q.rel) WHERE q.queue_id = v_q.queue_id;
  END LOOP;
END
$registration$;
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
ALTER FUNCTION outbox.tg_queue__heads() SECURITY DEFINER;
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

-- +goose Down
-- +goose StatementBegin
-- Back to 00003: what 00004 added goes; the functions it replaced get their 00003 bodies back.
DROP FUNCTION outbox.repair(text, boolean);
DROP TABLE outbox.repairs;
DROP FUNCTION outbox.next_due(text);
DROP FUNCTION outbox.queue_info(text);
DROP FUNCTION outbox._note_written(integer, oid, text[], bigint[], bigint[]);
DROP FUNCTION outbox._check_one_dimension(text, text, integer);
DROP FUNCTION outbox._locked_here(regclass, bigint[]);
-- Registration follows the table / producers write an event: registered queue tables lose the
-- TRUNCATE trigger (with its function), the pgdrain_* CHECKs, and get 00003's table-level INSERT
-- grant back; the registry loses id_sequence.
DO $registration_down$
DECLARE
  v_q record;
BEGIN
  FOR v_q IN SELECT q.table_oid::regclass AS rel FROM outbox.queues q
             WHERE pg_catalog.pg_table_is_visible(q.table_oid) IS NOT NULL LOOP
    EXECUTE pg_catalog.format('DROP TRIGGER IF EXISTS pgdrain_truncate ON %s', v_q.rel);
    EXECUTE pg_catalog.format(
      'ALTER TABLE %s DROP CONSTRAINT IF EXISTS pgdrain_attempt_count_not_negative,
         DROP CONSTRAINT IF EXISTS pgdrain_payload_not_json_null,
         DROP CONSTRAINT IF EXISTS pgdrain_partition_key_not_empty', v_q.rel);
    IF EXISTS (SELECT 1 FROM pg_catalog.pg_roles r WHERE r.rolname = 'pgdrain_producer') THEN
      EXECUTE pg_catalog.format('GRANT INSERT ON %s TO pgdrain_producer', v_q.rel);
    END IF;
  END LOOP;
END
$registration_down$;
DROP FUNCTION outbox.tg_queue__truncate();
DROP FUNCTION outbox._guard_queue_table(regclass, text, boolean);
DROP FUNCTION outbox._id_sequence(regclass);
ALTER TABLE outbox.queues DROP COLUMN id_sequence;
REVOKE EXECUTE ON FUNCTION outbox.stats(text), outbox.wedged_partitions(text, interval, integer),
  outbox.check_indexes(text) FROM pgdrain_worker;
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
  -- Keys this very transaction wrote get their heads at its commit; a claim in the same
  -- transaction (a test, a script) makes them now.
  IF pg_catalog.current_setting('pgdrain.commit_' || p_q.table_oid || '_keys', true) <> '' THEN
    PERFORM outbox._refresh_heads(p_q,
      pg_catalog.current_setting('pgdrain.commit_' || p_q.table_oid || '_keys')::text[]);
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
         SELECT t.id, t.%2$I, c.head_ctid
         FROM unnest($1::bigint[], $3::bigint[], $4::tid[], $5::text[]) AS c(id, floor_id, head_ctid, key)
         -- A head must point at a row of its own partition (heads of new keys come from settings a
         -- producer could forge); one that does not is stale and refreshed below.
         JOIN %1$s t ON t.id = c.id AND t.%2$I = c.key::%4$s
         WHERE %3$s
           -- OFFSET 0 keeps this a per-row subplan: pulled up into an anti join, the planner
           -- may leave p.id >= c.floor_id as a join filter and walk the poisoned rows again.
           AND NOT EXISTS (SELECT 1 FROM %1$s p
                           WHERE p.%2$I = t.%2$I AND p.id >= c.floor_id AND p.id < t.id
                             AND p.sent_at IS NULL AND p.attempt_count < $2
                           OFFSET 0)
         FOR UPDATE OF t SKIP LOCKED) t',
      v_table, p_q.partition_column, v_due, p_q.partition_type)
      INTO v_ids, v_claimed_keys, v_claimed_ctids USING v_heads, p_q.max_attempts, v_floors, v_ctids, v_keys;

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
-- Commit step of one partitioned queue for the current transaction (called by tg_queue__commit):
-- makes per-key delivery order equal commit order, and gives new keys their partition head.
--
-- 1. Takes the commit lock of every key hash the transaction wrote (hashtext(key) & 65535),
--    exclusively, in hash order, held until the commit is complete (advisory lock
--    (1885823232 + queue_id, 65536 + hash)); more than 256 hashes take the queue's whole commit
--    lock (objid -2) instead, so a bulk insert does not fill the lock table. Commits that share a
--    hash are serialised from here on; nothing else waits for these locks, so they can not deadlock.
-- 2. A key is late when a transaction that committed before us wrote a row of it (or of a key
--    with the same hash) with a larger id than our smallest: outbox.partition_clocks keeps
--    the largest committed id per hash, written only under these locks. A late key's rows of this
--    transaction get new ids from the id sequence, in their order, larger than every id already
--    given out: delivered order (id order) is then commit order. Not late (the usual case): no row
--    is written twice.
-- 3. Creates the heads of new keys (no waiting on producers: heads are created only here, under
--    the key's commit lock), wakes a head a claim left empty while we were open, and lowers a floor
--    that lies above our rows; NOTIFY when a partition became claimable.
-- 4. Raises the clocks to our largest ids.
--
-- Under REPEATABLE READ or SERIALIZABLE the clocks are read in the transaction's snapshot; when
-- another producer of the same hash committed after it started, raising the clock fails with
-- serialization_failure (40001), which those isolation levels already oblige the caller to retry.
CREATE OR REPLACE FUNCTION outbox._commit_partitions(p_q outbox.queues)
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
  v_setting constant text := 'pgdrain.commit_' || p_q.table_oid;
  v_keys text[] := NULLIF(pg_catalog.current_setting(v_setting || '_keys', true), '')::text[];
  v_mins bigint[] := NULLIF(pg_catalog.current_setting(v_setting || '_mins', true), '')::bigint[];
  v_maxs bigint[] := NULLIF(pg_catalog.current_setting(v_setting || '_maxs', true), '')::bigint[];
  v_renumbered boolean := false;
  v_issued bigint;
  v_sequence constant regclass := pg_catalog.pg_get_serial_sequence(p_q.table_oid::regclass::text, 'id')::regclass;
  v_late text[];
  v_late_los bigint[];
  v_late_his bigint[];
  v_late_clocks bigint[];
  v_new text[];
  v_empty text[];
  v_low_keys text[];
  v_low_ids bigint[];
  i integer;
BEGIN
  PERFORM pg_catalog.set_config(v_setting || '_keys', '', true),
          pg_catalog.set_config(v_setting || '_mins', '', true),
          pg_catalog.set_config(v_setting || '_maxs', '', true);
  IF v_keys IS NULL THEN
    RETURN;
  END IF;

  IF pg_catalog.cardinality(v_keys) > 256
     AND (SELECT pg_catalog.count(DISTINCT pg_catalog.hashtext(k) & 65535) FROM pg_catalog.unnest(v_keys) AS k) > 256 THEN
    PERFORM pg_catalog.pg_advisory_xact_lock(1885823232 + p_q.queue_id, -2);
  ELSE
    PERFORM pg_catalog.pg_advisory_xact_lock_shared(1885823232 + p_q.queue_id, -2),
            pg_catalog.pg_advisory_xact_lock(1885823232 + p_q.queue_id, 65536 + s.slot)
    FROM (SELECT DISTINCT pg_catalog.hashtext(k) & 65535 AS slot FROM pg_catalog.unnest(v_keys) AS k ORDER BY 1) s;
  END IF;

  -- A new statement: in READ COMMITTED its snapshot sees every commit that released these locks.
  -- One probe per key of the clocks and the heads (LATERAL: index probes whatever the statistics
  -- of these small tables say). Late keys are renumbered, then probed again.
  LOOP
    SELECT pg_catalog.array_agg(u.k ORDER BY u.k) FILTER (WHERE c.committed_max > u.lo),
           pg_catalog.array_agg(u.lo ORDER BY u.k) FILTER (WHERE c.committed_max > u.lo),
           pg_catalog.array_agg(u.hi ORDER BY u.k) FILTER (WHERE c.committed_max > u.lo),
           pg_catalog.array_agg(c.committed_max ORDER BY u.k) FILTER (WHERE c.committed_max > u.lo),
           pg_catalog.array_agg(u.k ORDER BY u.k) FILTER (WHERE h.found IS NULL),
           pg_catalog.array_agg(u.k ORDER BY u.k) FILTER (WHERE h.found AND h.head_id IS NULL),
           pg_catalog.array_agg(u.k ORDER BY u.k) FILTER (WHERE h.floor_id > u.lo),
           pg_catalog.array_agg(u.lo ORDER BY u.k) FILTER (WHERE h.floor_id > u.lo)
      INTO v_late, v_late_los, v_late_his, v_late_clocks, v_new, v_empty, v_low_keys, v_low_ids
    FROM unnest(v_keys, v_mins, v_maxs) AS u(k, lo, hi)
    LEFT JOIN LATERAL (SELECT x.committed_max FROM outbox.partition_clocks x
                       WHERE x.queue_id = p_q.queue_id AND x.slot = pg_catalog.hashtext(u.k) & 65535) c ON true
    LEFT JOIN LATERAL (SELECT true AS found, x.head_id, x.floor_id FROM outbox.partition_heads x
                       WHERE x.queue_id = p_q.queue_id AND x.partition_key = u.k) h ON true;
    EXIT WHEN v_late IS NULL OR v_renumbered;
    SELECT pg_catalog.array_agg(u.k ORDER BY u.k),
           pg_catalog.array_agg(COALESCE(r.lo, u.lo) ORDER BY u.k),
           pg_catalog.array_agg(COALESCE(r.hi, u.hi) ORDER BY u.k)
      INTO v_keys, v_mins, v_maxs
    FROM unnest(v_keys, v_mins, v_maxs) AS u(k, lo, hi)
    LEFT JOIN outbox._renumber_late_rows(p_q, v_sequence, v_late, v_late_los, v_late_his, v_late_clocks) r
      ON r.k = u.k;
    v_renumbered := true;
  END LOOP;

  -- New keys get their heads (in key order; DO NOTHING covers a head this transaction's own claims
  -- made). A floor above our rows (only possible for ids given explicitly or without a sequence,
  -- which are not renumbered) is lowered, one key at a time in key order.
  -- A head left empty and parked by a claim that ran while we were open: wake it for our rows.
  IF v_empty IS NOT NULL THEN
    FOR i IN 1..pg_catalog.cardinality(v_keys) LOOP
      CONTINUE WHEN v_keys[i] <> ALL (v_empty);
      UPDATE outbox.partition_heads h SET head_id = v_mins[i], parked_until = NULL
      WHERE h.queue_id = p_q.queue_id AND h.partition_key = v_keys[i] AND h.head_id IS NULL;
    END LOOP;
    PERFORM pg_catalog.pg_notify(p_q.channel, p_q.queue);
  END IF;
  IF v_new IS NOT NULL THEN
    WITH ins AS (
      INSERT INTO outbox.partition_heads (queue_id, partition_key, head_id, floor_id)
      SELECT p_q.queue_id, u.k, u.lo, u.lo
      FROM unnest(v_keys, v_mins) AS u(k, lo)
      WHERE u.k = ANY (v_new)
      ORDER BY u.k
      ON CONFLICT (queue_id, partition_key) DO NOTHING
      RETURNING 1)
    SELECT CASE WHEN EXISTS (SELECT 1 FROM ins) THEN v_new END INTO v_new;
    IF v_new IS NOT NULL THEN
      PERFORM pg_catalog.pg_notify(p_q.channel, p_q.queue);
    END IF;
  END IF;
  IF v_low_keys IS NOT NULL THEN
    FOR i IN 1..pg_catalog.cardinality(v_low_keys) LOOP
      UPDATE outbox.partition_heads h SET floor_id = v_low_ids[i]
      WHERE h.queue_id = p_q.queue_id AND h.partition_key = v_low_keys[i] AND h.floor_id > v_low_ids[i];
    END LOOP;
  END IF;

  -- The keys and ids come from transaction-local settings, which a producer could forge: a clock
  -- is never raised above the last id the sequence gave out, so a forged one can not stop later
  -- commits from being renumbered.
  v_issued := pg_catalog.pg_sequence_last_value(v_sequence);
  INSERT INTO outbox.partition_clocks AS c (queue_id, slot, committed_max)
  SELECT p_q.queue_id, pg_catalog.hashtext(u.k) & 65535, LEAST(pg_catalog.max(u.hi), v_issued)
  FROM unnest(v_keys, v_maxs) AS u(k, hi)
  GROUP BY 2 ORDER BY 2
  ON CONFLICT (queue_id, slot) DO UPDATE
    SET committed_max = GREATEST(c.committed_max, EXCLUDED.committed_max);
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
-- Gives this transaction's pending rows of the late keys new ids from the queue's id sequence, in
-- their order: larger than every id given out so far, so also than every committed row of the key
-- (see outbox._commit_partitions). Returns each renumbered key with its new smallest and largest id.
-- Skipped (the key keeps id order, and commits after a larger id keep that position) when ids do
-- not come from a sequence, or the sequence is behind the committed ids (ids given explicitly):
-- a new id must be larger than the committed ones and must not collide with a later default.
-- Arguments: the queue's id sequence (NULL: none), the late keys, and for each (aligned arrays)
-- this transaction's smallest and largest id and the key's clock as the caller read it.
CREATE OR REPLACE FUNCTION outbox._renumber_late_rows(p_q outbox.queues, p_sequence regclass, p_keys text[],
                                                      p_los bigint[], p_his bigint[], p_clocks bigint[])
RETURNS TABLE(k text, lo bigint, hi bigint)
LANGUAGE plpgsql
VOLATILE
SET search_path = ''
SET enable_seqscan = off
SET enable_bitmapscan = off
SET plan_cache_mode = force_generic_plan
SET jit = off
AS $$
DECLARE
  v_table regclass := p_q.table_oid::regclass;
  v_ids bigint[];
  v_old bigint;
  v_new bigint;
  i integer;
BEGIN
  IF p_sequence IS NULL THEN
    RETURN;
  END IF;
  FOR i IN 1..pg_catalog.cardinality(p_keys) LOOP
    CONTINUE WHEN COALESCE(pg_catalog.pg_sequence_last_value(p_sequence), 0) < p_clocks[i];

    EXECUTE pg_catalog.format(
      'SELECT pg_catalog.array_agg(t.id ORDER BY t.id) FROM %s t
       WHERE t.%I = $1::%s AND t.id BETWEEN $2 AND $3 AND t.sent_at IS NULL
         AND outbox._written_here(t.xmin)', v_table, p_q.partition_column, p_q.partition_type)
      INTO v_ids USING p_keys[i], p_los[i], p_his[i];
    CONTINUE WHEN v_ids IS NULL;

    k := p_keys[i];
    lo := NULL;
    FOREACH v_old IN ARRAY v_ids LOOP
      EXECUTE pg_catalog.format(
        'UPDATE %s SET id = pg_catalog.nextval($2) WHERE id = $1 RETURNING id', v_table)
        INTO v_new USING v_old, p_sequence;
      lo := COALESCE(lo, v_new);
    END LOOP;
    hi := v_new;
    RETURN NEXT;
  END LOOP;
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
-- Unregisters a queue: removes its triggers, partition heads and clocks and registry row; with
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
  DELETE FROM outbox.partition_clocks c WHERE c.queue_id = v_q.queue_id;
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
-- The commit step of producers: the constraint trigger pgdrain_commit on outbox.commit_hooks
-- (DEFERRABLE INITIALLY DEFERRED), whose row outbox.tg_queue__heads inserts once per transaction,
-- so it fires once, at COMMIT, after the transaction's last statement. It hands every partitioned
-- queue the transaction wrote to outbox._commit_partitions in queue_id order: the commit locks of
-- all transactions are then taken in one global order, and committing transactions never deadlock.
-- SET CONSTRAINTS outbox.pgdrain_commit IMMEDIATE runs it earlier (its locks are then held until
-- the transaction ends); rows written after that queue it again.
CREATE OR REPLACE FUNCTION outbox.tg_queue__commit()
RETURNS trigger
LANGUAGE plpgsql
SET search_path = ''
SET jit = off
AS $$
DECLARE
  v_queues text := NULLIF(pg_catalog.current_setting('pgdrain.commit_queues', true), '');
  v_q outbox.queues;
BEGIN
  DELETE FROM outbox.commit_hooks h WHERE h.xid = pg_catalog.pg_current_xact_id();
  PERFORM pg_catalog.set_config('pgdrain.commit_armed', '', true),
          pg_catalog.set_config('pgdrain.commit_queues', '', true);
  IF v_queues IS NULL THEN
    RETURN NULL;
  END IF;
  FOR v_q IN
    SELECT * FROM outbox.queues q
    WHERE q.table_oid::text = ANY (v_queues::text[]) AND q.partition_column IS NOT NULL
    ORDER BY q.queue_id
  LOOP
    PERFORM outbox._commit_partitions(v_q);
  END LOOP;
  RETURN NULL;
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- Statement-level AFTER INSERT trigger of a partitioned queue. It takes the partitions' advisory
-- locks SHARED until this transaction ends (producers never block each other, and no claim deletes
-- a head or raises a floor over rows that are not committed yet), then notes the statement's keys,
-- with the smallest and largest new id of each, for this transaction's commit step
-- (outbox.tg_queue__commit, queued here once per transaction), which orders them, renumbers late
-- rows and creates missing heads.
-- Nothing is written here: a producer never waits on another producer's uncommitted head.
-- The partition lock: advisory lock (1885823232 + queue_id, hashtext(key) & 1023), i.e. 1024 slots
-- per queue, so a 10,000-key insert takes at most 1024 locks and the lock table does not overflow.
-- Arguments: queue_id, partition column.
CREATE OR REPLACE FUNCTION outbox.tg_queue__heads()
RETURNS trigger
LANGUAGE plpgsql
SET search_path = ''
SET jit = off
AS $$
DECLARE
  v_queue_id integer := TG_ARGV[0]::integer;
  v_setting constant text := 'pgdrain.commit_' || TG_RELID;
  v_keys text[];
  v_mins bigint[];
  v_maxs bigint[];
  v_queues text;
BEGIN
  -- Rows that become claimable do so at commit, where the commit step sends the NOTIFY.
  PERFORM pg_catalog.set_config('pgdrain.quiet_' || TG_RELID, 'on', true);
  EXECUTE pg_catalog.format(
    'SELECT pg_catalog.array_agg(k ORDER BY k), pg_catalog.array_agg(lo ORDER BY k),
            pg_catalog.array_agg(hi ORDER BY k)
       FROM (SELECT %I::text AS k, pg_catalog.min(id) AS lo, pg_catalog.max(id) AS hi
               FROM pgdrain_new_rows WHERE sent_at IS NULL GROUP BY 1) s', TG_ARGV[1])
    INTO v_keys, v_mins, v_maxs;
  IF v_keys IS NULL THEN
    RETURN NULL;
  END IF;

  PERFORM pg_catalog.pg_advisory_xact_lock_shared(1885823232 + v_queue_id, s.slot)
  FROM (SELECT DISTINCT pg_catalog.hashtext(k) & 1023 AS slot
        FROM pg_catalog.unnest(v_keys) AS k ORDER BY 1) s;

  -- Merge with the keys of this transaction's earlier statements. The settings are transaction
  -- local, so a rolled back savepoint takes its keys with it, like its rows.
  IF pg_catalog.current_setting(v_setting || '_keys', true) <> '' THEN
    SELECT pg_catalog.array_agg(k ORDER BY k), pg_catalog.array_agg(lo ORDER BY k),
           pg_catalog.array_agg(hi ORDER BY k)
      INTO v_keys, v_mins, v_maxs
    FROM (SELECT u.k, pg_catalog.min(u.lo) AS lo, pg_catalog.max(u.hi) AS hi
          FROM (SELECT * FROM unnest(v_keys, v_mins, v_maxs)
                UNION ALL
                SELECT * FROM unnest(
                  pg_catalog.current_setting(v_setting || '_keys')::text[],
                  pg_catalog.current_setting(v_setting || '_mins')::bigint[],
                  pg_catalog.current_setting(v_setting || '_maxs')::bigint[])) AS u(k, lo, hi)
          GROUP BY u.k) s;
  END IF;
  PERFORM pg_catalog.set_config(v_setting || '_keys', v_keys::text, true),
          pg_catalog.set_config(v_setting || '_mins', v_mins::text, true),
          pg_catalog.set_config(v_setting || '_maxs', v_maxs::text, true);

  v_queues := COALESCE(NULLIF(pg_catalog.current_setting('pgdrain.commit_queues', true), ''), '{}');
  IF NOT TG_RELID::text = ANY (v_queues::text[]) THEN
    PERFORM pg_catalog.set_config('pgdrain.commit_queues',
                                  (v_queues::text[] || TG_RELID::text)::text, true);
  END IF;
  -- The first statement of the transaction queues the commit step: a row in outbox.commit_hooks,
  -- whose deferred constraint trigger fires at COMMIT. The pending trigger event is on that table,
  -- not on the queue table, so DDL and TRUNCATE of the queue in the same transaction still work.
  IF pg_catalog.current_setting('pgdrain.commit_armed', true) IS DISTINCT FROM 'on' THEN
    INSERT INTO outbox.commit_hooks DEFAULT VALUES;
    PERFORM pg_catalog.set_config('pgdrain.commit_armed', 'on', true);
  END IF;
  RETURN NULL;
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
ALTER FUNCTION outbox.tg_queue__heads() SECURITY DEFINER;
ALTER FUNCTION outbox.tg_queue__commit() SECURITY DEFINER;
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
-- (GRANT INSERT ON public.events TO pgdrain_producer); the heads and commit triggers run as definer.
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

