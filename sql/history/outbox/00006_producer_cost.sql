-- +goose Up
-- +goose StatementBegin
-- Gives a partitioned queue its heads trigger: a statement-level AFTER INSERT trigger running a
-- function made for this queue, outbox.tg_queue__heads_q<queue_id>, whose query names the partition
-- column statically, so PL/pgSQL plans it once per session instead of on every statement (a generic
-- function would need a dynamic EXECUTE). It hands the statement's keys, with the smallest and
-- largest new id of each, to outbox._note_written. Made again by every create_queue, so it always
-- matches the registration; outbox.repair reinstalls it when it is missing or differs.
-- SECURITY DEFINER like the other triggers: a producer can not write what _note_written writes.
CREATE OR REPLACE FUNCTION outbox._install_heads_trigger(p_q outbox.queues)
RETURNS void
LANGUAGE plpgsql
VOLATILE
SET search_path = ''
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
SET search_path = ''
AS $body$
-- Made by outbox._install_heads_trigger for queue %2$s; do not edit.
DECLARE
  v_keys text[];
  v_mins bigint[];
  v_maxs bigint[];
BEGIN
  SELECT pg_catalog.array_agg(s.k), pg_catalog.array_agg(s.lo), pg_catalog.array_agg(s.hi)
    INTO v_keys, v_mins, v_maxs
  FROM (SELECT n.%3$I::text AS k, pg_catalog.min(n.id) AS lo, pg_catalog.max(n.id) AS hi
        FROM pgdrain_new_rows n WHERE n.sent_at IS NULL GROUP BY 1 ORDER BY 1) s;
  IF v_keys IS NOT NULL THEN
    PERFORM outbox._note_written(%4$s, TG_RELID, v_keys, v_mins, v_maxs);
  END IF;
  RETURN NULL;
END;
$body$
$f$, v_function, pg_catalog.quote_literal(p_q.queue), p_q.partition_column, p_q.queue_id);
  EXECUTE pg_catalog.format('REVOKE ALL ON FUNCTION %s() FROM PUBLIC', v_function);
  EXECUTE pg_catalog.format('DROP TRIGGER IF EXISTS pgdrain_heads ON %s', p_q.table_oid::regclass);
  EXECUTE pg_catalog.format(
    'CREATE TRIGGER pgdrain_heads AFTER INSERT ON %s REFERENCING NEW TABLE AS pgdrain_new_rows
       FOR EACH STATEMENT EXECUTE FUNCTION %s()', p_q.table_oid::regclass, v_function);
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
  IF pg_catalog.current_setting('pgdrain.commit_' || p_q.table_oid || '_keys', true) <> '' THEN
    PERFORM outbox._refresh_heads(p_q, ARRAY(SELECT DISTINCT k FROM pg_catalog.unnest(
      pg_catalog.current_setting('pgdrain.commit_' || p_q.table_oid || '_keys')::text[]) AS k));
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
  v_keys text[];
  v_mins bigint[];
  v_maxs bigint[];
  v_renumbered boolean := false;
  v_issued bigint;
  v_sequence constant regclass := p_q.id_sequence;
  v_any_late boolean;
  v_late_clocks bigint[];
  v_new text[];
  v_empty text[];
  v_low_keys text[];
  v_wrote boolean;
BEGIN
  -- What the transaction's statements noted (outbox._note_written appends), merged per key.
  SELECT pg_catalog.array_agg(s.k), pg_catalog.array_agg(s.lo), pg_catalog.array_agg(s.hi)
    INTO v_keys, v_mins, v_maxs
  FROM (SELECT u.k, pg_catalog.min(u.lo) AS lo, pg_catalog.max(u.hi) AS hi
        FROM unnest(NULLIF(pg_catalog.current_setting(v_setting || '_keys', true), '')::text[],
                    NULLIF(pg_catalog.current_setting(v_setting || '_mins', true), '')::bigint[],
                    NULLIF(pg_catalog.current_setting(v_setting || '_maxs', true), '')::bigint[]) AS u(k, lo, hi)
        GROUP BY u.k ORDER BY u.k) s;
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
    SELECT pg_catalog.bool_or(c.committed_max > u.lo),
           pg_catalog.array_agg(CASE WHEN c.committed_max > u.lo THEN c.committed_max END ORDER BY u.k),
           pg_catalog.array_agg(u.k ORDER BY u.k) FILTER (WHERE h.found IS NULL),
           pg_catalog.array_agg(u.k ORDER BY u.k) FILTER (WHERE h.found AND h.head_id IS NULL),
           pg_catalog.array_agg(u.k ORDER BY u.k) FILTER (WHERE h.floor_id > u.lo)
      INTO v_any_late, v_late_clocks, v_new, v_empty, v_low_keys
    FROM unnest(v_keys, v_mins, v_maxs) AS u(k, lo, hi)
    -- A hash with no clock yet counts from the queue's clock_base: ids given out before the queue
    -- was (re)registered or truncated, which sessions with a cached sequence may still hand out.
    LEFT JOIN LATERAL (SELECT COALESCE((SELECT x.committed_max FROM outbox.partition_clocks x
                       WHERE x.queue_id = p_q.queue_id AND x.slot = pg_catalog.hashtext(u.k) & 65535),
                       p_q.clock_base) AS committed_max) c ON true
    LEFT JOIN LATERAL (SELECT true AS found, x.head_id, x.floor_id FROM outbox.partition_heads x
                       WHERE x.queue_id = p_q.queue_id AND x.partition_key = u.k) h ON true;
    EXIT WHEN NOT v_any_late OR v_renumbered;
    -- v_keys is in key order, and so are the clocks aggregated above and what comes back.
    SELECT pg_catalog.array_agg(r.k ORDER BY r.k), pg_catalog.array_agg(r.lo ORDER BY r.k),
           pg_catalog.array_agg(r.hi ORDER BY r.k)
      INTO v_keys, v_mins, v_maxs
    FROM outbox._renumber_late_rows(p_q, v_sequence, v_keys, v_mins, v_maxs, v_late_clocks) r;
    v_renumbered := true;
  END LOOP;

  -- New keys get their heads, a head a claim left empty while we were open is woken, and a floor
  -- above our rows (ids given explicitly, which are not renumbered) is lowered: one upsert in key
  -- order. ON CONFLICT works on the head's latest version, so a head another session made or
  -- changed after our probe (a rebuild after a crash) is corrected too, not silently kept. NOTIFY
  -- when it wrote anything: a partition became claimable.
  IF v_new IS NOT NULL OR v_empty IS NOT NULL OR v_low_keys IS NOT NULL THEN
    WITH up AS (
      -- A new head's floor is our smallest id (poisoned rows before it are not walked again) only
      -- while the queue's heads are complete: after a crash "no head" may mean the heads were lost
      -- while older rows of the key are still pending, and the floor is 0 until a claim raises it.
      INSERT INTO outbox.partition_heads AS h (queue_id, partition_key, head_id, floor_id)
      SELECT p_q.queue_id, u.k, u.lo,
             CASE WHEN EXISTS (SELECT 1 FROM outbox.partition_heads_built b WHERE b.queue_id = p_q.queue_id)
                  THEN u.lo ELSE 0 END
      FROM unnest(v_keys, v_mins) AS u(k, lo)
      WHERE u.k = ANY (v_new) OR u.k = ANY (v_empty) OR u.k = ANY (v_low_keys)
      ORDER BY u.k
      ON CONFLICT (queue_id, partition_key) DO UPDATE
        SET head_id = COALESCE(h.head_id, EXCLUDED.head_id),
            parked_until = CASE WHEN h.head_id IS NULL THEN NULL ELSE h.parked_until END,
            floor_id = LEAST(h.floor_id, EXCLUDED.head_id)
        WHERE h.head_id IS NULL OR h.floor_id > EXCLUDED.head_id
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
-- Notes rows this transaction wrote to a partitioned queue (a producer's INSERT, through its
-- generated heads trigger, or requeue_poisoned moving rows to the tail of their keys) for its
-- commit step. It takes the partitions' advisory locks SHARED until the transaction ends (producers
-- never block each other, and no claim deletes a head or raises a floor over rows that are not
-- committed yet), appends the keys with the smallest and largest id of each to transaction-local
-- settings (a rolled back savepoint takes its keys with it, like its rows), and, once per
-- transaction, queues the commit step (outbox.tg_queue__commit) by inserting a row into
-- outbox.commit_hooks.
-- The settings are only appended to (text, no parsing): a transaction of many statements costs the
-- same per statement whatever it wrote before; the commit step merges repeated keys once.
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
  v_keys constant text := pg_catalog.current_setting(v_setting || '_keys', true);
  v_queues text;
BEGIN
  -- Rows that become claimable do so at commit, where the commit step sends the NOTIFY.
  PERFORM pg_catalog.set_config('pgdrain.quiet_' || p_table, 'on', true);
  IF pg_catalog.cardinality(p_keys) = 1 THEN
    PERFORM pg_catalog.pg_advisory_xact_lock_shared(1885823232 + p_queue_id, pg_catalog.hashtext(p_keys[1]) & 1023);
  ELSE
    PERFORM pg_catalog.pg_advisory_xact_lock_shared(1885823232 + p_queue_id, s.slot)
    FROM (SELECT DISTINCT pg_catalog.hashtext(k) & 1023 AS slot
          FROM pg_catalog.unnest(p_keys) AS k ORDER BY 1) s;
  END IF;

  -- Array literals are appended as text: '{a,b}' and '{c}' make '{a,b,c}'.
  IF v_keys IS NULL OR v_keys = '' THEN
    PERFORM pg_catalog.set_config(v_setting || '_keys', p_keys::text, true),
            pg_catalog.set_config(v_setting || '_mins', p_mins::text, true),
            pg_catalog.set_config(v_setting || '_maxs', p_maxs::text, true);
  ELSE
    PERFORM pg_catalog.set_config(v_setting || '_keys',
              pg_catalog.rtrim(v_keys, '}') || ',' || pg_catalog.ltrim(p_keys::text, '{'), true),
            pg_catalog.set_config(v_setting || '_mins',
              pg_catalog.rtrim(pg_catalog.current_setting(v_setting || '_mins'), '}') || ','
              || pg_catalog.ltrim(p_mins::text, '{'), true),
            pg_catalog.set_config(v_setting || '_maxs',
              pg_catalog.rtrim(pg_catalog.current_setting(v_setting || '_maxs'), '}') || ','
              || pg_catalog.ltrim(p_maxs::text, '{'), true);
  END IF;

  -- The first statement of the transaction queues the commit step: a row in outbox.commit_hooks,
  -- whose deferred constraint trigger fires at COMMIT. The pending trigger event is on that table,
  -- not on the queue table, so DDL and TRUNCATE of the queue in the same transaction still work.
  -- Armed before the insert: under SET CONSTRAINTS ... IMMEDIATE the hook's trigger fires at the end
  -- of that INSERT, runs the commit step for what is noted so far and disarms, so the next statement
  -- queues it again.
  IF pg_catalog.current_setting('pgdrain.commit_armed', true) IS DISTINCT FROM 'on' THEN
    PERFORM pg_catalog.set_config('pgdrain.commit_armed', 'on', true);
    v_queues := COALESCE(NULLIF(pg_catalog.current_setting('pgdrain.commit_queues', true), ''), '{}');
    IF NOT p_table::text = ANY (v_queues::text[]) THEN
      PERFORM pg_catalog.set_config('pgdrain.commit_queues', (v_queues::text[] || p_table::text)::text, true);
    END IF;
    INSERT INTO outbox.commit_hooks DEFAULT VALUES;
  ELSIF pg_catalog.strpos(pg_catalog.current_setting('pgdrain.commit_queues', true), p_table::text) = 0
     OR NOT p_table::text = ANY (pg_catalog.current_setting('pgdrain.commit_queues')::text[]) THEN
    PERFORM pg_catalog.set_config('pgdrain.commit_queues',
      (pg_catalog.current_setting('pgdrain.commit_queues')::text[] || p_table::text)::text, true);
  END IF;
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
-- hashtext(key) & 1023 of lock space 1885823232 + queue_id, see outbox._note_written) taken
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
-- One statement renumbers every late row, so a bulk transaction costs a few statements, not one
-- per row.
-- Arguments: the queue's id sequence (NULL: none), every key the transaction wrote and for each
-- (aligned arrays) its smallest and largest id and, when the key is late, its clock as the caller
-- read it (NULL: not late). Returns every key with its smallest and largest id after renumbering.
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
  v_last bigint;
  v_ids bigint[];
  v_clock bigint;
  v_first bigint;
BEGIN
  v_last := COALESCE(pg_catalog.pg_sequence_last_value(p_sequence), 0);
  SELECT pg_catalog.max(u.clock) INTO v_clock
  FROM unnest(p_clocks) AS u(clock) WHERE u.clock <= v_last;
  IF p_sequence IS NOT NULL AND v_clock IS NOT NULL THEN
    -- This transaction's rows of every late key, in id order: one index range per key (LATERAL,
    -- kept as such by OFFSET 0, whatever the statistics of a table just filled say). Rows of the top transaction are known
    -- by their xmin; only others (a savepoint's, another producer's) need outbox._written_here.
    EXECUTE pg_catalog.format(
      'SELECT pg_catalog.array_agg(x.id ORDER BY x.id)
       FROM unnest($1::text[], $2::bigint[], $3::bigint[], $4::bigint[]) AS u(k, lo, hi, clock)
       CROSS JOIN LATERAL (
         SELECT t.id FROM %s t
         WHERE t.%I = u.k::%s AND t.id BETWEEN u.lo AND u.hi AND t.sent_at IS NULL
           AND (t.xmin = $6 OR outbox._written_here(t.xmin))
         OFFSET 0) x
       WHERE u.clock <= $5',
      p_q.table_oid::regclass, p_q.partition_column, p_q.partition_type)
      INTO v_ids USING p_keys, p_los, p_his, p_clocks, v_last,
        (pg_catalog.pg_current_xact_id()::text::bigint % 4294967296)::text::xid;
  END IF;
  IF v_ids IS NULL THEN
    RETURN QUERY SELECT * FROM unnest(p_keys, p_los, p_his);
    RETURN;
  END IF;

  v_first := pg_catalog.nextval(p_sequence);
  WHILE v_first <= v_clock LOOP
    v_first := pg_catalog.nextval(p_sequence);
  END LOOP;
  -- New ids drawn in the rows' order (the CTE is not inlined, nextval being volatile, and yields
  -- in ordinality order), each above every late key's clock.
  RETURN QUERY EXECUTE pg_catalog.format(
    'WITH fresh AS (
       SELECT o.id AS old_id, CASE WHEN o.n = 1 THEN $2 ELSE pg_catalog.nextval($3) END AS new_id
       FROM unnest($1::bigint[]) WITH ORDINALITY AS o(id, n)
       ORDER BY o.n),
     moved AS (
       UPDATE %1$s t SET id = f.new_id FROM fresh f WHERE t.id = f.old_id
       RETURNING t.%2$I::text AS k, t.id),
     -- Every key with its range: that of its moved rows if any, else the one it came with.
     spans AS (
       SELECT m.k, m.id AS lo, m.id AS hi, true AS moved FROM moved m
       UNION ALL
       SELECT u.k, u.lo, u.hi, false FROM unnest($4::text[], $5::bigint[], $6::bigint[]) AS u(k, lo, hi))
     SELECT b.k, COALESCE(pg_catalog.min(b.lo) FILTER (WHERE b.moved), pg_catalog.min(b.lo)),
            COALESCE(pg_catalog.max(b.hi) FILTER (WHERE b.moved), pg_catalog.max(b.hi))
     FROM spans b GROUP BY b.k',
    p_q.table_oid::regclass, p_q.partition_column)
    USING v_ids, v_first, p_sequence, p_keys, p_los, p_his;
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
-- The commit step of producers: the constraint trigger pgdrain_commit on outbox.commit_hooks
-- (DEFERRABLE INITIALLY DEFERRED), whose row outbox._note_written inserts once per transaction,
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
-- Every registered partitioned queue gets its own heads trigger function (static SQL, planned once
-- per session); the generic outbox.tg_queue__heads, which planned a dynamic query per statement,
-- goes. A registered queue whose table is gone keeps no trigger: create_queue installs one when it
-- registers the new table.
SELECT outbox._install_heads_trigger(q)
FROM outbox.queues q
WHERE q.partition_column IS NOT NULL AND pg_catalog.pg_table_is_visible(q.table_oid) IS NOT NULL
ORDER BY q.queue_id;
DROP FUNCTION outbox.tg_queue__heads();
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

-- +goose Down
-- +goose StatementBegin
-- Back to 00005: the generic heads trigger function comes back, every partitioned queue's trigger
-- calls it again, and the per-queue functions go.
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
ALTER FUNCTION outbox.tg_queue__heads() SECURITY DEFINER;
REVOKE ALL ON FUNCTION outbox.tg_queue__heads() FROM PUBLIC;
DO $down$
DECLARE
  q outbox.queues;
BEGIN
  FOR q IN SELECT * FROM outbox.queues x
           WHERE x.partition_column IS NOT NULL AND pg_catalog.pg_table_is_visible(x.table_oid) IS NOT NULL
  LOOP
    EXECUTE pg_catalog.format('DROP TRIGGER IF EXISTS pgdrain_heads ON %s', q.table_oid::regclass);
    EXECUTE pg_catalog.format(
      'CREATE TRIGGER pgdrain_heads AFTER INSERT ON %s REFERENCING NEW TABLE AS pgdrain_new_rows
         FOR EACH STATEMENT EXECUTE FUNCTION outbox.tg_queue__heads(%s, %L)',
      q.table_oid::regclass, q.queue_id, q.partition_column);
  END LOOP;
  FOR q IN SELECT * FROM outbox.queues LOOP
    EXECUTE pg_catalog.format('DROP FUNCTION IF EXISTS outbox.%I()', 'tg_queue__heads_q' || q.queue_id);
  END LOOP;
END;
$down$;
DROP FUNCTION outbox._install_heads_trigger(outbox.queues);
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
    -- A hash with no clock yet counts from the queue's clock_base: ids given out before the queue
    -- was (re)registered or truncated, which sessions with a cached sequence may still hand out.
    LEFT JOIN LATERAL (SELECT COALESCE((SELECT x.committed_max FROM outbox.partition_clocks x
                       WHERE x.queue_id = p_q.queue_id AND x.slot = pg_catalog.hashtext(u.k) & 65535),
                       p_q.clock_base) AS committed_max) c ON true
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
      -- A new head's floor is our smallest id (poisoned rows before it are not walked again) only
      -- while the queue's heads are complete: after a crash "no head" may mean the heads were lost
      -- while older rows of the key are still pending, and the floor is 0 until a claim raises it.
      INSERT INTO outbox.partition_heads AS h (queue_id, partition_key, head_id, floor_id)
      SELECT p_q.queue_id, u.k, u.lo,
             CASE WHEN EXISTS (SELECT 1 FROM outbox.partition_heads_built b WHERE b.queue_id = p_q.queue_id)
                  THEN u.lo ELSE 0 END
      FROM unnest(v_keys, v_mins) AS u(k, lo)
      WHERE u.k = ANY (v_new) OR u.k = ANY (v_empty) OR u.k = ANY (v_low_keys)
      ORDER BY u.k
      ON CONFLICT (queue_id, partition_key) DO UPDATE
        SET head_id = COALESCE(h.head_id, EXCLUDED.head_id),
            parked_until = CASE WHEN h.head_id IS NULL THEN NULL ELSE h.parked_until END,
            floor_id = LEAST(h.floor_id, EXCLUDED.head_id)
        WHERE h.head_id IS NULL OR h.floor_id > EXCLUDED.head_id
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

