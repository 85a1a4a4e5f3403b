-- +goose Up
-- +goose StatementBegin
-- Gives a partitioned queue the two hints its claims share (see outbox._claim), as UNLOGGED
-- sequences: a sequence is not versioned, so moving it on every claim leaves no dead tuple behind
-- for anyone to walk, whatever holds the xmin horizon back, and costs no WAL; after a crash both
-- start again from nothing, which only costs one scan from the front.
--   outbox.claim_front_q<queue_id>  when (epoch milliseconds) a claim last searched the ready heads
--                                   from the front: one claim per second per queue does;
--   outbox.claim_start_q<queue_id>  the fresh head id where that search stopped: a claim without a
--                                   cursor of its own starts there, past the dead entries the drain
--                                   left in front.
-- Made by create_queue; dropped by drop_queue.
CREATE OR REPLACE FUNCTION outbox._install_claim_hints(p_q outbox.queues)
RETURNS void
LANGUAGE plpgsql
VOLATILE
SET search_path = ''
SET client_min_messages = warning
AS $$
BEGIN
  EXECUTE pg_catalog.format('CREATE UNLOGGED SEQUENCE IF NOT EXISTS outbox.%I', 'claim_start_q' || p_q.queue_id);
  EXECUTE pg_catalog.format('CREATE UNLOGGED SEQUENCE IF NOT EXISTS outbox.%I', 'claim_front_q' || p_q.queue_id);
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- The claim behind claim_batch (mode 'lease', partitioned queues; claim_batch leases unpartitioned
-- rows in one statement of its own) and claim_locked (mode 'lock'). Returns the ids of the claimed
-- rows; the caller reads them back. Deliverable = unsent, not poisoned, due, lease free or expired,
-- and on a partitioned queue the first deliverable row of its partition.
--
-- Partitioned queues claim through outbox.partition_heads (one row per partition with pending
-- work), never through the pending rows themselves, so blocked successors, heads in backoff and
-- poisoned rows cost nothing: a head backing off is "parked" until its time and woken (at most a
-- bounded number per call) when that time has come; a head whose row is leased stays ready and is
-- passed over with one probe. Heads are locked FOR NO KEY UPDATE SKIP LOCKED, which concurrent
-- claimers skip and producers (who hold only advisory locks) do not wait for. Each candidate is
-- still checked against the FIFO rule on the queue table, from the partition's floor (below it
-- every row is sent or poisoned), so poisoned rows in front of a head are not walked again.
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
  v_claimed_keys text[];
  v_stale text[];
  v_remaining integer := p_batch_size;
  v_until timestamptz;
  -- Where this session's last claim of this queue stopped among fresh heads (attempt_count 0), in
  -- head_id order, and when that run of claims started from the front (epoch seconds). Heads a claim
  -- or result moved on leave dead index entries in front of the live ones until vacuum removes them,
  -- which it can not while another session holds the xmin horizon: starting past them keeps a claim
  -- from walking the whole drain's history. A per-session hint only: a claim that finds fewer heads
  -- past it than it wants goes on from the front, and a cursor older than a second is not used.
  -- Heads behind every cursor (a lease that ran out, a row given back, a claim rolled back) are
  -- reached by the one claim per second per queue that searches from the front (the queue's shared
  -- hints, below); a session without a cursor starts where that search stopped. Retried heads
  -- (attempt_count > 0) are always searched from the front, after the fresh ones.
  v_cursor constant text := 'pgdrain.claim_cursor_' || p_q.queue_id;
  v_cursor_value constant text[] := pg_catalog.string_to_array(
    NULLIF(pg_catalog.current_setting(v_cursor, true), ''), ',');
  v_run_started double precision := CASE
    WHEN v_cursor_value[2]::double precision > pg_catalog.date_part('epoch', v_now) - 1
    THEN v_cursor_value[2]::double precision END;
  v_from_head bigint := CASE WHEN v_run_started IS NOT NULL THEN v_cursor_value[1]::bigint END;
  v_last_fresh bigint;
  v_front_duty boolean := false;
  v_only_fresh boolean;
  -- The queue's shared hints (outbox._install_claim_hints); NULL when the queue has none.
  v_start constant regclass := pg_catalog.to_regclass('outbox.claim_start_q' || p_q.queue_id);
  v_front_hint constant regclass := pg_catalog.to_regclass('outbox.claim_front_q' || p_q.queue_id);
  v_now_ms constant bigint := (pg_catalog.date_part('epoch', v_now) * 1000)::bigint;
  v_front_ms bigint;
  v_seen text[] := '{}';
  v_busy text[];
  v_front boolean;
  v_asked integer;
  -- Lock mode: rows this transaction already holds from an earlier claim_locked. SKIP LOCKED does
  -- not skip our own locks, so without excluding them before the LIMIT they would take the places
  -- of rows that can still be claimed.
  v_held bigint[] := CASE WHEN p_mode = 'lock' THEN COALESCE(pg_catalog.string_to_array(NULLIF(
    pg_catalog.current_setting('pgdrain.held_' || p_q.queue_id, true), ''), ',')::bigint[], '{}') ELSE '{}' END;
BEGIN
  IF p_q.partition_column IS NULL THEN  -- lock mode only (see above)
    EXECUTE pg_catalog.format(
      'SELECT pg_catalog.array_agg(id) FROM (
         SELECT t.id FROM %s t WHERE %s AND t.id <> ALL ($4)
         ORDER BY t.attempt_count, t.id LIMIT $1 FOR UPDATE SKIP LOCKED) s',
      v_table, pg_catalog.replace(v_due, '$now', '$3'))
      INTO v_all USING p_batch_size, p_q.max_attempts, v_now, v_held;
    RETURN COALESCE(v_all, '{}');
  END IF;

  IF NOT EXISTS (SELECT 1 FROM outbox.partition_heads_built b WHERE b.queue_id = p_q.queue_id) THEN
    PERFORM outbox._restore_heads(p_q);
  END IF;
  -- Keys this very transaction wrote get their heads at its commit; a claim in the same
  -- transaction (a test, a script) makes them now.
  IF pg_catalog.current_setting('pgdrain.commit_' || p_q.table_oid || '_keys', true) <> ''
     OR pg_catalog.current_setting('pgdrain.commit_' || p_q.table_oid || '_span', true) <> '' THEN
    PERFORM outbox._refresh_heads(p_q, ARRAY(SELECT n.k FROM outbox._noted_keys(p_q, false) n));
  END IF;

  -- What producers could not write to heads a claim held while they committed.
  PERFORM outbox._apply_wakes(p_q);

  -- Wake parked heads whose lease or backoff has ended, oldest first, a bounded number per call.
  -- By ctid: a TID scan touches exactly these heads whatever the statistics say.
  UPDATE outbox.partition_heads h SET parked_until = NULL
  WHERE h.ctid = ANY (ARRAY(
    SELECT w.ctid FROM outbox.partition_heads w
    WHERE w.queue_id = p_q.queue_id AND w.parked_until <= v_now
    ORDER BY w.parked_until
    LIMIT GREATEST(4 * p_batch_size, 64)
    FOR NO KEY UPDATE SKIP LOCKED));

  -- No cursor of this session's own (a new session, or its run started over a second ago): only one
  -- claim per second per queue searches from the front, the one that finds the last search a second
  -- old, and leaves where it stopped as the queue's start; the others start there, past the dead
  -- entries the drain left in front (which a held xmin keeps), and their run is as old as that search.
  IF v_from_head IS NULL AND v_front_hint IS NOT NULL AND v_start IS NOT NULL THEN
    v_front_ms := pg_catalog.pg_sequence_last_value(v_front_hint);
    IF v_front_ms > v_now_ms - 1000 AND v_front_ms <= v_now_ms THEN
      v_from_head := pg_catalog.pg_sequence_last_value(v_start);
      v_run_started := v_front_ms / 1000.0;
    ELSE
      PERFORM pg_catalog.setval(v_front_hint, v_now_ms);
      v_front_duty := true;
    END IF;
  END IF;

  FOR pass IN 1..4 LOOP
    v_front := v_from_head IS NULL;
    v_asked := v_remaining;
    IF NOT v_front THEN
      SELECT pg_catalog.array_agg(s.partition_key), pg_catalog.array_agg(s.head_id),
             pg_catalog.array_agg(s.floor_id), pg_catalog.max(s.head_id)
        INTO v_keys, v_heads, v_floors, v_last_fresh
      FROM (SELECT h.partition_key, h.head_id, h.floor_id FROM outbox.partition_heads h
            WHERE h.queue_id = p_q.queue_id AND h.parked_until IS NULL
              AND h.attempt_count = 0 AND h.head_id > v_from_head
              AND h.head_id <> ALL (v_all || v_held) AND h.partition_key <> ALL (v_seen)
            ORDER BY h.attempt_count, h.head_id
            LIMIT v_remaining
            FOR NO KEY UPDATE SKIP LOCKED) s;
      -- Too few past the cursor: the next pass goes on from the front; otherwise past these heads
      -- (a head in flight is not walked again by every pass).
      IF v_keys IS NULL OR pg_catalog.cardinality(v_keys) < v_remaining THEN
        v_from_head := NULL;
      ELSE
        v_from_head := v_last_fresh;
      END IF;
    ELSE
      SELECT pg_catalog.array_agg(s.partition_key), pg_catalog.array_agg(s.head_id),
             pg_catalog.array_agg(s.floor_id), pg_catalog.max(s.head_id) FILTER (WHERE s.attempt_count = 0),
             pg_catalog.bool_and(s.attempt_count = 0)
        INTO v_keys, v_heads, v_floors, v_last_fresh, v_only_fresh
      FROM (SELECT h.partition_key, h.head_id, h.floor_id, h.attempt_count FROM outbox.partition_heads h
            WHERE h.queue_id = p_q.queue_id AND h.parked_until IS NULL
              -- In lock mode claimed heads are not parked, and SKIP LOCKED does not skip our own
              -- locks: without this a later pass would take them again.
              AND (h.head_id IS NULL OR h.head_id <> ALL (v_all || v_held))
              AND h.partition_key <> ALL (v_seen)
            ORDER BY h.attempt_count, h.head_id
            LIMIT v_remaining
            FOR NO KEY UPDATE SKIP LOCKED) s;
      v_run_started := pg_catalog.date_part('epoch', v_now);
      -- As many fresh heads as asked for: the next pass goes on past them as from a cursor.
      IF v_only_fresh AND pg_catalog.cardinality(v_keys) = v_remaining THEN
        v_from_head := v_last_fresh;
      END IF;
    END IF;
    IF v_keys IS NULL THEN
      EXIT WHEN v_front;
      CONTINUE;
    END IF;
    IF v_last_fresh IS NOT NULL THEN
      PERFORM pg_catalog.set_config(v_cursor, v_last_fresh || ',' || v_run_started, false);
      IF v_front_duty AND v_front THEN
        PERFORM pg_catalog.setval(v_start, v_last_fresh);
      END IF;
    END IF;

    EXECUTE pg_catalog.format(
      'SELECT pg_catalog.array_agg(t.id), pg_catalog.array_agg(t.%2$I::text)
       FROM (
         SELECT t.id, t.%2$I
         FROM unnest($1::bigint[], $3::bigint[], $4::text[]) AS c(id, floor_id, key)
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
      v_table, p_q.partition_column, pg_catalog.replace(v_due, '$now', '$5'), p_q.partition_type)
      INTO v_ids, v_claimed_keys USING v_heads, p_q.max_attempts, v_floors, v_keys, v_now;

    IF v_ids IS NOT NULL THEN
      v_all := v_all || v_ids;
      v_remaining := v_remaining - pg_catalog.cardinality(v_ids);
      IF p_mode = 'lease' THEN
        v_until := pg_catalog.clock_timestamp() + p_lease;
        EXECUTE pg_catalog.format(
          'UPDATE %s SET lease_token = pg_catalog.gen_random_uuid(), leased_until = $2
           WHERE id = ANY ($1)', v_table)
          USING v_ids, v_until;
      END IF;
    END IF;

    -- Heads not claimed are in flight (their row is leased right now: nothing to refresh, their
    -- result moves them on, and an expired lease makes the row claimable again through the same
    -- head; this call looks at them no more) or stale: pointing at a row that is no longer (or not
    -- yet) the partition's deliverable head, refreshed here.
    SELECT pg_catalog.array_agg(k) INTO v_stale
    FROM pg_catalog.unnest(v_keys) AS k
    WHERE k <> ALL (COALESCE(v_claimed_keys, '{}'));
    v_busy := NULL;
    IF v_stale IS NOT NULL THEN
      EXECUTE pg_catalog.format(
        'SELECT pg_catalog.array_agg(c.key) FILTER (WHERE t.id IS NULL),
                pg_catalog.array_agg(c.key) FILTER (WHERE t.id IS NOT NULL)
         FROM unnest($1::bigint[], $2::text[]) AS c(id, key)
         LEFT JOIN %1$s t ON t.id = c.id AND t.%2$I = c.key::%3$s AND t.sent_at IS NULL
           AND t.attempt_count < $4 AND t.leased_until > $5
           AND (t.next_attempt_at IS NULL OR t.next_attempt_at <= t.leased_until)
         WHERE c.key = ANY ($3)',
        v_table, p_q.partition_column, p_q.partition_type)
        INTO v_stale, v_busy USING v_heads, v_keys, v_stale, p_q.max_attempts, v_now;
      v_seen := v_seen || COALESCE(v_busy, '{}');
    END IF;
    IF v_stale IS NOT NULL THEN
      PERFORM outbox._refresh_heads(p_q, v_stale);
    END IF;
    EXIT WHEN v_remaining <= 0;
    -- From the front, fewer heads than asked for and nothing refreshed: there is nothing more.
    EXIT WHEN v_front AND v_stale IS NULL AND pg_catalog.cardinality(v_keys) < v_asked;
  END LOOP;
  RETURN v_all;
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
    DELETE FROM outbox.partition_wakes w WHERE w.queue_id = v_old.queue_id;
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
    PERFORM outbox._install_claim_hints(q) FROM outbox.queues q WHERE q.queue_id = v_queue_id;
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
-- Unregisters a queue: removes its triggers (and its heads trigger function), partition heads, built-mark, clocks and registry row;
-- with drop_table = true also drops the table. The indexes, CHECKs and grants stay with the table.
-- Works when the table is already gone (dropped outside drop_queue): then only the registration
-- and its derived state go.
CREATE OR REPLACE FUNCTION outbox.drop_queue(queue text, drop_table boolean DEFAULT false)
RETURNS void
LANGUAGE plpgsql
VOLATILE
SET search_path = ''
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
    EXECUTE pg_catalog.format('DROP TRIGGER IF EXISTS pgdrain_truncate ON %s', v_rel);
  END IF;
  -- The queue's own heads trigger function (outbox._install_heads_trigger).
  EXECUTE pg_catalog.format('DROP FUNCTION IF EXISTS outbox.%I()', 'tg_queue__heads_q' || v_q.queue_id);
  -- Its claim hints (outbox._install_claim_hints).
  EXECUTE pg_catalog.format('DROP SEQUENCE IF EXISTS outbox.%I', 'claim_start_q' || v_q.queue_id);
  EXECUTE pg_catalog.format('DROP SEQUENCE IF EXISTS outbox.%I', 'claim_front_q' || v_q.queue_id);
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- Every registered partitioned queue gets the claim hints its claims share (outbox._install_claim_hints).
SELECT outbox._install_claim_hints(q)
FROM outbox.queues q
WHERE q.partition_column IS NOT NULL
ORDER BY q.queue_id;
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
ALTER FUNCTION outbox.poisoned_rows(text, integer, bigint) SECURITY DEFINER;
ALTER FUNCTION outbox.release_lease(text, bigint) SECURITY DEFINER;
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
-- +goose StatementEnd

-- +goose Down
-- +goose StatementBegin
-- Back to 00015: claims without shared hints (each session searches from the front once a second).
DO $$
DECLARE
  r record;
BEGIN
  FOR r IN SELECT c.oid::regclass AS seq FROM pg_catalog.pg_class c
           WHERE c.relnamespace = 'outbox'::regnamespace AND c.relkind = 'S'
             AND (c.relname LIKE 'claim\_start\_q%' OR c.relname LIKE 'claim\_front\_q%') LOOP
    EXECUTE pg_catalog.format('DROP SEQUENCE %s', r.seq);
  END LOOP;
END;
$$;
DROP FUNCTION outbox._install_claim_hints(outbox.queues);
-- +goose StatementEnd

-- +goose StatementBegin
-- The claim behind claim_batch (mode 'lease', partitioned queues; claim_batch leases unpartitioned
-- rows in one statement of its own) and claim_locked (mode 'lock'). Returns the ids of the claimed
-- rows; the caller reads them back. Deliverable = unsent, not poisoned, due, lease free or expired,
-- and on a partitioned queue the first deliverable row of its partition.
--
-- Partitioned queues claim through outbox.partition_heads (one row per partition with pending
-- work), never through the pending rows themselves, so blocked successors, heads in backoff and
-- poisoned rows cost nothing: a head backing off is "parked" until its time and woken (at most a
-- bounded number per call) when that time has come; a head whose row is leased stays ready and is
-- passed over with one probe. Heads are locked FOR NO KEY UPDATE SKIP LOCKED, which concurrent
-- claimers skip and producers (who hold only advisory locks) do not wait for. Each candidate is
-- still checked against the FIFO rule on the queue table, from the partition's floor (below it
-- every row is sent or poisoned), so poisoned rows in front of a head are not walked again.
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
  v_claimed_keys text[];
  v_stale text[];
  v_remaining integer := p_batch_size;
  v_until timestamptz;
  -- Where this session's last claim of this queue stopped among fresh heads (attempt_count 0), in
  -- head_id order, and when that run of claims started from the front (epoch seconds). Heads a claim
  -- or result moved on leave dead index entries in front of the live ones until vacuum removes them,
  -- which it can not while another session holds the xmin horizon: starting past them keeps a claim
  -- from walking the whole drain's history. A per-session hint only: a claim that finds fewer heads
  -- past it than it wants goes on from the front, and a cursor older than a second is not used, so
  -- heads behind every cursor (a lease that ran out, a row given back, a claim rolled back) are
  -- reached at least once a second per session. Retried heads (attempt_count > 0) are always
  -- searched from the front, after the fresh ones.
  v_cursor constant text := 'pgdrain.claim_cursor_' || p_q.queue_id;
  v_cursor_value constant text[] := pg_catalog.string_to_array(
    NULLIF(pg_catalog.current_setting(v_cursor, true), ''), ',');
  v_run_started double precision := CASE
    WHEN v_cursor_value[2]::double precision > pg_catalog.date_part('epoch', v_now) - 1
    THEN v_cursor_value[2]::double precision END;
  v_from_head bigint := CASE WHEN v_run_started IS NOT NULL THEN v_cursor_value[1]::bigint END;
  v_last_fresh bigint;
  v_seen text[] := '{}';
  v_busy text[];
  v_front boolean;
  v_asked integer;
  -- Lock mode: rows this transaction already holds from an earlier claim_locked. SKIP LOCKED does
  -- not skip our own locks, so without excluding them before the LIMIT they would take the places
  -- of rows that can still be claimed.
  v_held bigint[] := CASE WHEN p_mode = 'lock' THEN COALESCE(pg_catalog.string_to_array(NULLIF(
    pg_catalog.current_setting('pgdrain.held_' || p_q.queue_id, true), ''), ',')::bigint[], '{}') ELSE '{}' END;
BEGIN
  IF p_q.partition_column IS NULL THEN  -- lock mode only (see above)
    EXECUTE pg_catalog.format(
      'SELECT pg_catalog.array_agg(id) FROM (
         SELECT t.id FROM %s t WHERE %s AND t.id <> ALL ($4)
         ORDER BY t.attempt_count, t.id LIMIT $1 FOR UPDATE SKIP LOCKED) s',
      v_table, pg_catalog.replace(v_due, '$now', '$3'))
      INTO v_all USING p_batch_size, p_q.max_attempts, v_now, v_held;
    RETURN COALESCE(v_all, '{}');
  END IF;

  IF NOT EXISTS (SELECT 1 FROM outbox.partition_heads_built b WHERE b.queue_id = p_q.queue_id) THEN
    PERFORM outbox._restore_heads(p_q);
  END IF;
  -- Keys this very transaction wrote get their heads at its commit; a claim in the same
  -- transaction (a test, a script) makes them now.
  IF pg_catalog.current_setting('pgdrain.commit_' || p_q.table_oid || '_keys', true) <> ''
     OR pg_catalog.current_setting('pgdrain.commit_' || p_q.table_oid || '_span', true) <> '' THEN
    PERFORM outbox._refresh_heads(p_q, ARRAY(SELECT n.k FROM outbox._noted_keys(p_q, false) n));
  END IF;

  -- What producers could not write to heads a claim held while they committed.
  PERFORM outbox._apply_wakes(p_q);

  -- Wake parked heads whose lease or backoff has ended, oldest first, a bounded number per call.
  -- By ctid: a TID scan touches exactly these heads whatever the statistics say.
  UPDATE outbox.partition_heads h SET parked_until = NULL
  WHERE h.ctid = ANY (ARRAY(
    SELECT w.ctid FROM outbox.partition_heads w
    WHERE w.queue_id = p_q.queue_id AND w.parked_until <= v_now
    ORDER BY w.parked_until
    LIMIT GREATEST(4 * p_batch_size, 64)
    FOR NO KEY UPDATE SKIP LOCKED));

  FOR pass IN 1..4 LOOP
    v_front := v_from_head IS NULL;
    v_asked := v_remaining;
    IF NOT v_front THEN
      SELECT pg_catalog.array_agg(s.partition_key), pg_catalog.array_agg(s.head_id),
             pg_catalog.array_agg(s.floor_id), pg_catalog.max(s.head_id)
        INTO v_keys, v_heads, v_floors, v_last_fresh
      FROM (SELECT h.partition_key, h.head_id, h.floor_id FROM outbox.partition_heads h
            WHERE h.queue_id = p_q.queue_id AND h.parked_until IS NULL
              AND h.attempt_count = 0 AND h.head_id > v_from_head
              AND h.head_id <> ALL (v_all || v_held) AND h.partition_key <> ALL (v_seen)
            ORDER BY h.attempt_count, h.head_id
            LIMIT v_remaining
            FOR NO KEY UPDATE SKIP LOCKED) s;
      -- Too few past the cursor: the next pass goes on from the front.
      IF v_keys IS NULL OR pg_catalog.cardinality(v_keys) < v_remaining THEN
        v_from_head := NULL;
      END IF;
    ELSE
      SELECT pg_catalog.array_agg(s.partition_key), pg_catalog.array_agg(s.head_id),
             pg_catalog.array_agg(s.floor_id), pg_catalog.max(s.head_id) FILTER (WHERE s.attempt_count = 0)
        INTO v_keys, v_heads, v_floors, v_last_fresh
      FROM (SELECT h.partition_key, h.head_id, h.floor_id, h.attempt_count FROM outbox.partition_heads h
            WHERE h.queue_id = p_q.queue_id AND h.parked_until IS NULL
              -- In lock mode claimed heads are not parked, and SKIP LOCKED does not skip our own
              -- locks: without this a later pass would take them again.
              AND (h.head_id IS NULL OR h.head_id <> ALL (v_all || v_held))
              AND h.partition_key <> ALL (v_seen)
            ORDER BY h.attempt_count, h.head_id
            LIMIT v_remaining
            FOR NO KEY UPDATE SKIP LOCKED) s;
      v_run_started := pg_catalog.date_part('epoch', v_now);
    END IF;
    IF v_keys IS NULL THEN
      EXIT WHEN v_front;
      CONTINUE;
    END IF;
    IF v_last_fresh IS NOT NULL THEN
      PERFORM pg_catalog.set_config(v_cursor, v_last_fresh || ',' || v_run_started, false);
    END IF;

    EXECUTE pg_catalog.format(
      'SELECT pg_catalog.array_agg(t.id), pg_catalog.array_agg(t.%2$I::text)
       FROM (
         SELECT t.id, t.%2$I
         FROM unnest($1::bigint[], $3::bigint[], $4::text[]) AS c(id, floor_id, key)
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
      v_table, p_q.partition_column, pg_catalog.replace(v_due, '$now', '$5'), p_q.partition_type)
      INTO v_ids, v_claimed_keys USING v_heads, p_q.max_attempts, v_floors, v_keys, v_now;

    IF v_ids IS NOT NULL THEN
      v_all := v_all || v_ids;
      v_remaining := v_remaining - pg_catalog.cardinality(v_ids);
      IF p_mode = 'lease' THEN
        v_until := pg_catalog.clock_timestamp() + p_lease;
        EXECUTE pg_catalog.format(
          'UPDATE %s SET lease_token = pg_catalog.gen_random_uuid(), leased_until = $2
           WHERE id = ANY ($1)', v_table)
          USING v_ids, v_until;
      END IF;
    END IF;

    -- Heads not claimed are in flight (their row is leased right now: nothing to refresh, their
    -- result moves them on, and an expired lease makes the row claimable again through the same
    -- head; this call looks at them no more) or stale: pointing at a row that is no longer (or not
    -- yet) the partition's deliverable head, refreshed here.
    SELECT pg_catalog.array_agg(k) INTO v_stale
    FROM pg_catalog.unnest(v_keys) AS k
    WHERE k <> ALL (COALESCE(v_claimed_keys, '{}'));
    v_busy := NULL;
    IF v_stale IS NOT NULL THEN
      EXECUTE pg_catalog.format(
        'SELECT pg_catalog.array_agg(c.key) FILTER (WHERE t.id IS NULL),
                pg_catalog.array_agg(c.key) FILTER (WHERE t.id IS NOT NULL)
         FROM unnest($1::bigint[], $2::text[]) AS c(id, key)
         LEFT JOIN %1$s t ON t.id = c.id AND t.%2$I = c.key::%3$s AND t.sent_at IS NULL
           AND t.attempt_count < $4 AND t.leased_until > $5
           AND (t.next_attempt_at IS NULL OR t.next_attempt_at <= t.leased_until)
         WHERE c.key = ANY ($3)',
        v_table, p_q.partition_column, p_q.partition_type)
        INTO v_stale, v_busy USING v_heads, v_keys, v_stale, p_q.max_attempts, v_now;
      v_seen := v_seen || COALESCE(v_busy, '{}');
    END IF;
    IF v_stale IS NOT NULL THEN
      PERFORM outbox._refresh_heads(p_q, v_stale);
    END IF;
    EXIT WHEN v_remaining <= 0;
    -- From the front, fewer heads than asked for and nothing refreshed: there is nothing more.
    EXIT WHEN v_front AND v_stale IS NULL AND pg_catalog.cardinality(v_keys) < v_asked;
  END LOOP;
  RETURN v_all;
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
    DELETE FROM outbox.partition_wakes w WHERE w.queue_id = v_old.queue_id;
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
-- Unregisters a queue: removes its triggers (and its heads trigger function), partition heads, built-mark, clocks and registry row;
-- with drop_table = true also drops the table. The indexes, CHECKs and grants stay with the table.
-- Works when the table is already gone (dropped outside drop_queue): then only the registration
-- and its derived state go.
CREATE OR REPLACE FUNCTION outbox.drop_queue(queue text, drop_table boolean DEFAULT false)
RETURNS void
LANGUAGE plpgsql
VOLATILE
SET search_path = ''
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
    EXECUTE pg_catalog.format('DROP TRIGGER IF EXISTS pgdrain_truncate ON %s', v_rel);
  END IF;
  -- The queue's own heads trigger function (outbox._install_heads_trigger).
  EXECUTE pg_catalog.format('DROP FUNCTION IF EXISTS outbox.%I()', 'tg_queue__heads_q' || v_q.queue_id);
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
GRANT USAGE ON SCHEMA outbox TO pgdrain_worker, pgdrain_producer, pgdrain_operator, pgdrain_reader;

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
ALTER FUNCTION outbox.poisoned_rows(text, integer, bigint) SECURITY DEFINER;
ALTER FUNCTION outbox.release_lease(text, bigint) SECURITY DEFINER;
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
-- +goose StatementEnd

