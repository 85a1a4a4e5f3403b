-- +goose Up
-- +goose StatementBegin
-- The keys this transaction wrote to a partitioned queue so far, each with its smallest and largest
-- id, in key order, as outbox._note_written noted them: from the transaction-local lists, or, for a
-- transaction of many statements, from this transaction's rows in the span of ids it noted
-- (p_forget: clear the notes, as the commit step does).
CREATE OR REPLACE FUNCTION outbox._noted_keys(p_q outbox.queues, p_forget boolean)
RETURNS TABLE(k text, lo bigint, hi bigint)
LANGUAGE plpgsql
VOLATILE
SET search_path = ''
SET enable_seqscan = off
SET enable_bitmapscan = off
SET jit = off
AS $$
DECLARE
  v_setting constant text := 'pgdrain.commit_' || p_q.table_oid;
  v_span constant text := NULLIF(pg_catalog.current_setting(v_setting || '_span', true), '');
BEGIN
  IF v_span IS NULL THEN
    RETURN QUERY
      SELECT u.k, pg_catalog.min(u.lo), pg_catalog.max(u.hi)
      FROM unnest(NULLIF(pg_catalog.current_setting(v_setting || '_keys', true), '')::text[],
                  NULLIF(pg_catalog.current_setting(v_setting || '_mins', true), '')::bigint[],
                  NULLIF(pg_catalog.current_setting(v_setting || '_maxs', true), '')::bigint[]) AS u(k, lo, hi)
      GROUP BY u.k ORDER BY u.k;
  ELSE
    -- Rows of the top transaction are known by their xmin; only a savepoint's need the lookup.
    RETURN QUERY EXECUTE pg_catalog.format(
      'SELECT t.%I::text, pg_catalog.min(t.id), pg_catalog.max(t.id) FROM %s t
       WHERE t.id BETWEEN $1 AND $2 AND t.sent_at IS NULL AND (t.xmin = $3 OR outbox._written_here(t.xmin))
       GROUP BY 1 ORDER BY 1', p_q.partition_column, p_q.table_oid::regclass)
      USING pg_catalog.split_part(v_span, ',', 1)::bigint, pg_catalog.split_part(v_span, ',', 2)::bigint,
            (pg_catalog.pg_current_xact_id()::text::bigint % 4294967296)::text::xid;
  END IF;
  IF p_forget THEN
    PERFORM pg_catalog.set_config(v_setting || '_keys', '', true),
            pg_catalog.set_config(v_setting || '_mins', '', true),
            pg_catalog.set_config(v_setting || '_maxs', '', true),
            pg_catalog.set_config(v_setting || '_span', '', true);
  END IF;
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
-- Commit step of one partitioned queue for the current transaction (called by tg_queue__commit):
-- makes per-key delivery order equal commit order, and gives new keys their partition head.
--
-- 1. Takes the commit lock of every key hash the transaction wrote (hashtext(key) & 65535), held
--    until the commit is complete: the hash's row of outbox.partition_clocks, locked FOR UPDATE in
--    hash order (made first, at the queue's clock_base, when the hash has none; made in hash order
--    too). A row lock, not an advisory one: a bulk transaction of 20,000 keys locks 20,000 rows
--    without filling the lock table, and producers of other hashes never wait for it. Commits that
--    share a hash are serialised from here on; only commit steps take these locks, all in one
--    order, so they can not deadlock.
-- 2. A key is late when a transaction that committed before us wrote a row of it (or of a key
--    with the same hash) with a larger id than our smallest: outbox.partition_clocks keeps
--    the largest committed id per hash, written only under these locks. A late key's rows of this
--    transaction get new ids from the id sequence, in their order, larger than every id already
--    given out: delivered order (id order) is then commit order. Not late (the usual case): no row
--    is written twice.
-- 3. Holds each existing head of its keys FOR KEY SHARE until the transaction ends, so that no claim
--    deletes it or raises its floor over our rows before they are visible (a claim takes FOR UPDATE,
--    and skips heads it can not lock, see outbox._refresh_heads); creates the heads of new keys,
--    wakes a head a claim left empty while we were open, and lowers a floor that lies above our
--    rows. It never waits for a claim: a head a claim holds (SKIP LOCKED) gets a wake note in
--    outbox.partition_wakes instead, which the next claim applies once that claim is over.
--    NOTIFY when a partition became claimable.
-- 4. Raises the clocks to our largest ids.
--
-- Under REPEATABLE READ or SERIALIZABLE the clocks are read in the transaction's snapshot; when
-- another producer of the same hash committed after it started, raising the clock fails with
-- serialization_failure (40001), which those isolation levels already oblige the caller to retry.
-- Heads are not locked there (a lock on a version newer than the snapshot fails with 40001 too,
-- and claims move heads all the time): every key with a head gets a wake note.
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
  v_contended text[];
  v_contended_new text[];
  v_wrote boolean := false;
  v_slots integer[];
  v_read_committed constant boolean := pg_catalog.current_setting('transaction_isolation') = 'read committed';
BEGIN
  -- What the transaction's statements noted (outbox._note_written), merged per key.
  SELECT pg_catalog.array_agg(n.k ORDER BY n.k), pg_catalog.array_agg(n.lo ORDER BY n.k),
         pg_catalog.array_agg(n.hi ORDER BY n.k)
    INTO v_keys, v_mins, v_maxs
  FROM outbox._noted_keys(p_q, true) n;
  IF v_keys IS NULL THEN
    RETURN;
  END IF;

  v_slots := ARRAY(SELECT DISTINCT pg_catalog.hashtext(k) & 65535 FROM pg_catalog.unnest(v_keys) AS k ORDER BY 1);
  INSERT INTO outbox.partition_clocks AS c (queue_id, slot, committed_max)
  SELECT p_q.queue_id, s.slot, p_q.clock_base FROM pg_catalog.unnest(v_slots) AS s(slot) ORDER BY s.slot
  ON CONFLICT (queue_id, slot) DO NOTHING;
  PERFORM 1 FROM (SELECT c.slot FROM outbox.partition_clocks c
                  WHERE c.queue_id = p_q.queue_id AND c.slot = ANY (v_slots)
                  ORDER BY c.slot FOR UPDATE) l;

  -- A new statement: in READ COMMITTED its snapshot sees every commit that released these locks.
  -- One probe per key of the clocks and the heads (LATERAL: index probes whatever the statistics
  -- of these small tables say). Late keys are renumbered, then probed again.
  LOOP
    SELECT pg_catalog.bool_or(c.committed_max > u.lo),
           pg_catalog.array_agg(CASE WHEN c.committed_max > u.lo THEN c.committed_max END ORDER BY u.k),
           pg_catalog.array_agg(u.k ORDER BY u.k) FILTER (WHERE NOT e.found),
           pg_catalog.array_agg(u.k ORDER BY u.k) FILTER (WHERE h.held AND h.head_id IS NULL),
           pg_catalog.array_agg(u.k ORDER BY u.k) FILTER (WHERE h.held AND h.floor_id > u.lo),
           pg_catalog.array_agg(u.k ORDER BY u.k) FILTER (WHERE e.found AND h.held IS NULL)
      INTO v_any_late, v_late_clocks, v_new, v_empty, v_low_keys, v_contended
    FROM unnest(v_keys, v_mins, v_maxs) AS u(k, lo, hi)
    -- Every hash has its clock now (a new one starts at the queue's clock_base: ids given out before
    -- the queue was (re)registered or truncated, which sessions with a cached sequence may still
    -- hand out).
    LEFT JOIN LATERAL (SELECT x.committed_max FROM outbox.partition_clocks x
                       WHERE x.queue_id = p_q.queue_id AND x.slot = pg_catalog.hashtext(u.k) & 65535) c ON true
    LEFT JOIN LATERAL (SELECT EXISTS (SELECT 1 FROM outbox.partition_heads x
                       WHERE x.queue_id = p_q.queue_id AND x.partition_key = u.k) AS found) e ON true
    -- The head's latest version, held until we commit; none when a claim holds it (or, under
    -- REPEATABLE READ or SERIALIZABLE, always).
    LEFT JOIN LATERAL (SELECT true AS held, x.head_id, x.floor_id FROM outbox.partition_heads x
                       WHERE v_read_committed AND x.queue_id = p_q.queue_id AND x.partition_key = u.k
                       FOR KEY SHARE SKIP LOCKED) h ON true;
    EXIT WHEN NOT v_any_late OR v_renumbered;
    -- v_keys is in key order, and so are the clocks aggregated above and what comes back.
    SELECT pg_catalog.array_agg(r.k ORDER BY r.k), pg_catalog.array_agg(r.lo ORDER BY r.k),
           pg_catalog.array_agg(r.hi ORDER BY r.k)
      INTO v_keys, v_mins, v_maxs
    FROM outbox._renumber_late_rows(p_q, v_sequence, v_keys, v_mins, v_maxs, v_late_clocks) r;
    v_renumbered := true;
  END LOOP;

  -- New keys get their heads, a head a claim left empty while we were open is woken, and a floor
  -- above our rows (ids given explicitly, which are not renumbered) is lowered. A head another
  -- session holds or made meanwhile is left to a wake note. NOTIFY when anything was written: a
  -- partition became (or may have become) claimable.
  IF v_new IS NOT NULL THEN
    -- A new head's floor is our smallest id (poisoned rows before it are not walked again) only
    -- while the queue's heads are complete: after a crash "no head" may mean the heads were lost
    -- while older rows of the key are still pending, and the floor is 0 until a claim raises it.
    WITH made AS (
      INSERT INTO outbox.partition_heads AS h (queue_id, partition_key, head_id, floor_id)
      SELECT p_q.queue_id, u.k, u.lo,
             CASE WHEN EXISTS (SELECT 1 FROM outbox.partition_heads_built b WHERE b.queue_id = p_q.queue_id)
                  THEN u.lo ELSE 0 END
      FROM unnest(v_keys, v_mins) AS u(k, lo)
      WHERE u.k = ANY (v_new)
      ORDER BY u.k
      ON CONFLICT (queue_id, partition_key) DO NOTHING
      RETURNING h.partition_key)
    SELECT pg_catalog.array_agg(k) INTO v_contended_new FROM pg_catalog.unnest(v_new) AS k
    WHERE k NOT IN (SELECT made.partition_key FROM made);
    v_contended := v_contended || v_contended_new;
    v_wrote := true;
  END IF;
  IF v_empty IS NOT NULL OR v_low_keys IS NOT NULL THEN
    WITH fixed AS (
      UPDATE outbox.partition_heads h
      SET head_id = COALESCE(h.head_id, u.lo),
          parked_until = CASE WHEN h.head_id IS NULL THEN NULL ELSE h.parked_until END,
          floor_id = LEAST(h.floor_id, u.lo)
      FROM unnest(v_keys, v_mins) AS u(k, lo)
      WHERE h.queue_id = p_q.queue_id AND h.partition_key = u.k
        AND (u.k = ANY (v_empty) OR u.k = ANY (v_low_keys))
        AND h.ctid = ANY (ARRAY(SELECT x.ctid FROM outbox.partition_heads x
                                WHERE x.queue_id = p_q.queue_id
                                  AND (x.partition_key = ANY (v_empty) OR x.partition_key = ANY (v_low_keys))
                                FOR NO KEY UPDATE SKIP LOCKED))
      RETURNING h.partition_key)
    SELECT pg_catalog.array_agg(k) INTO v_contended_new
    FROM pg_catalog.unnest(v_empty || v_low_keys) AS k
    WHERE k NOT IN (SELECT fixed.partition_key FROM fixed);
    v_contended := v_contended || v_contended_new;
    v_wrote := true;
  END IF;
  IF v_contended IS NOT NULL THEN
    INSERT INTO outbox.partition_wakes (queue_id, partition_key, low_id)
    SELECT p_q.queue_id, u.k, u.lo FROM unnest(v_keys, v_mins) AS u(k, lo) WHERE u.k = ANY (v_contended);
    v_wrote := true;
  END IF;
  IF v_wrote THEN
    PERFORM pg_catalog.pg_notify(p_q.channel, p_q.queue);
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
-- commit step: appends the keys with the smallest and largest id of each to transaction-local
-- settings (a rolled back savepoint takes its keys with it, like its rows) and, once per
-- transaction, queues the commit step (outbox.tg_queue__commit) by inserting a row into
-- outbox.commit_hooks. It takes no lock: a producer's INSERT never waits, and what protects its
-- uncommitted rows from a claim that finds their partition empty is the commit step's (see
-- outbox._commit_partitions and outbox._refresh_heads).
-- The settings are only appended to (text, no parsing): a transaction of many statements costs the
-- same per statement whatever it wrote before; the commit step merges repeated keys once.
CREATE OR REPLACE FUNCTION outbox._note_written(p_table oid, p_keys text[], p_mins bigint[], p_maxs bigint[])
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
  v_span text;
BEGIN
  -- Rows that become claimable do so at commit, where the commit step sends the NOTIFY.
  PERFORM pg_catalog.set_config('pgdrain.quiet_' || p_table, 'on', true);

  -- Array literals are appended as text: '{a,b}' and '{c}' make '{a,b,c}'. Past 8 kB of keys (a
  -- transaction of many statements) only the span of ids is kept, "lo,hi", so a statement costs the
  -- same however many came before; the commit step then reads the keys from those rows.
  v_span := NULLIF(pg_catalog.current_setting(v_setting || '_span', true), '');
  IF v_span IS NULL AND pg_catalog.length(v_keys) > 8192 THEN
    SELECT pg_catalog.min(lo) || ',' || pg_catalog.max(hi) INTO v_span
    FROM unnest(pg_catalog.current_setting(v_setting || '_mins')::bigint[],
                pg_catalog.current_setting(v_setting || '_maxs')::bigint[]) AS u(lo, hi);
    PERFORM pg_catalog.set_config(v_setting || '_keys', '', true),
            pg_catalog.set_config(v_setting || '_mins', '', true),
            pg_catalog.set_config(v_setting || '_maxs', '', true);
  END IF;
  IF v_span IS NOT NULL THEN
    PERFORM pg_catalog.set_config(v_setting || '_span',
      LEAST(pg_catalog.split_part(v_span, ',', 1)::bigint, (SELECT pg_catalog.min(x) FROM pg_catalog.unnest(p_mins) x))
      || ',' ||
      GREATEST(pg_catalog.split_part(v_span, ',', 2)::bigint, (SELECT pg_catalog.max(x) FROM pg_catalog.unnest(p_maxs) x)),
      true);
  ELSIF v_keys IS NULL OR v_keys = '' THEN
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
-- Statement-level AFTER TRUNCATE trigger (pgdrain_truncate) of every queue table: the rows are
-- gone, so is everything derived from them. Deletes the queue's partition heads (they would point
-- at rows that no longer exist, with floors above the ids a RESTART IDENTITY hands out again) and
-- its clocks (they would make every later commit "late") and wake notes, and forgets the keys this transaction
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
  DELETE FROM outbox.partition_wakes w USING outbox.queues q
  WHERE q.table_oid = TG_RELID AND w.queue_id = q.queue_id;
  -- Ids still cached by sessions count as given out before this point (RESTART IDENTITY has already
  -- reset the sequence here, so the base is then where it starts again).
  UPDATE outbox.queues q SET clock_base = COALESCE(pg_catalog.pg_sequence_last_value(q.id_sequence), 0)
  WHERE q.table_oid = TG_RELID;
  IF pg_catalog.current_setting(v_setting || '_keys', true) <> ''
     OR pg_catalog.current_setting(v_setting || '_span', true) <> '' THEN
    PERFORM pg_catalog.set_config(v_setting || '_keys', '', true),
            pg_catalog.set_config(v_setting || '_mins', '', true),
            pg_catalog.set_config(v_setting || '_maxs', '', true),
            pg_catalog.set_config(v_setting || '_span', '', true);
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
-- Back to 00008: commit locks are advisory locks again, a transaction of many statements keeps
-- every key in its settings (the functions below).
DROP FUNCTION outbox._noted_keys(outbox.queues, boolean);
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
-- 3. Holds each existing head of its keys FOR KEY SHARE until the transaction ends, so that no claim
--    deletes it or raises its floor over our rows before they are visible (a claim takes FOR UPDATE,
--    and skips heads it can not lock, see outbox._refresh_heads); creates the heads of new keys,
--    wakes a head a claim left empty while we were open, and lowers a floor that lies above our
--    rows. It never waits for a claim: a head a claim holds (SKIP LOCKED) gets a wake note in
--    outbox.partition_wakes instead, which the next claim applies once that claim is over.
--    NOTIFY when a partition became claimable.
-- 4. Raises the clocks to our largest ids.
--
-- Under REPEATABLE READ or SERIALIZABLE the clocks are read in the transaction's snapshot; when
-- another producer of the same hash committed after it started, raising the clock fails with
-- serialization_failure (40001), which those isolation levels already oblige the caller to retry.
-- Heads are not locked there (a lock on a version newer than the snapshot fails with 40001 too,
-- and claims move heads all the time): every key with a head gets a wake note.
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
  v_contended text[];
  v_contended_new text[];
  v_wrote boolean := false;
  v_read_committed constant boolean := pg_catalog.current_setting('transaction_isolation') = 'read committed';
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
           pg_catalog.array_agg(u.k ORDER BY u.k) FILTER (WHERE NOT e.found),
           pg_catalog.array_agg(u.k ORDER BY u.k) FILTER (WHERE h.held AND h.head_id IS NULL),
           pg_catalog.array_agg(u.k ORDER BY u.k) FILTER (WHERE h.held AND h.floor_id > u.lo),
           pg_catalog.array_agg(u.k ORDER BY u.k) FILTER (WHERE e.found AND h.held IS NULL)
      INTO v_any_late, v_late_clocks, v_new, v_empty, v_low_keys, v_contended
    FROM unnest(v_keys, v_mins, v_maxs) AS u(k, lo, hi)
    -- A hash with no clock yet counts from the queue's clock_base: ids given out before the queue
    -- was (re)registered or truncated, which sessions with a cached sequence may still hand out.
    LEFT JOIN LATERAL (SELECT COALESCE((SELECT x.committed_max FROM outbox.partition_clocks x
                       WHERE x.queue_id = p_q.queue_id AND x.slot = pg_catalog.hashtext(u.k) & 65535),
                       p_q.clock_base) AS committed_max) c ON true
    LEFT JOIN LATERAL (SELECT EXISTS (SELECT 1 FROM outbox.partition_heads x
                       WHERE x.queue_id = p_q.queue_id AND x.partition_key = u.k) AS found) e ON true
    -- The head's latest version, held until we commit; none when a claim holds it (or, under
    -- REPEATABLE READ or SERIALIZABLE, always).
    LEFT JOIN LATERAL (SELECT true AS held, x.head_id, x.floor_id FROM outbox.partition_heads x
                       WHERE v_read_committed AND x.queue_id = p_q.queue_id AND x.partition_key = u.k
                       FOR KEY SHARE SKIP LOCKED) h ON true;
    EXIT WHEN NOT v_any_late OR v_renumbered;
    -- v_keys is in key order, and so are the clocks aggregated above and what comes back.
    SELECT pg_catalog.array_agg(r.k ORDER BY r.k), pg_catalog.array_agg(r.lo ORDER BY r.k),
           pg_catalog.array_agg(r.hi ORDER BY r.k)
      INTO v_keys, v_mins, v_maxs
    FROM outbox._renumber_late_rows(p_q, v_sequence, v_keys, v_mins, v_maxs, v_late_clocks) r;
    v_renumbered := true;
  END LOOP;

  -- New keys get their heads, a head a claim left empty while we were open is woken, and a floor
  -- above our rows (ids given explicitly, which are not renumbered) is lowered. A head another
  -- session holds or made meanwhile is left to a wake note. NOTIFY when anything was written: a
  -- partition became (or may have become) claimable.
  IF v_new IS NOT NULL THEN
    -- A new head's floor is our smallest id (poisoned rows before it are not walked again) only
    -- while the queue's heads are complete: after a crash "no head" may mean the heads were lost
    -- while older rows of the key are still pending, and the floor is 0 until a claim raises it.
    WITH made AS (
      INSERT INTO outbox.partition_heads AS h (queue_id, partition_key, head_id, floor_id)
      SELECT p_q.queue_id, u.k, u.lo,
             CASE WHEN EXISTS (SELECT 1 FROM outbox.partition_heads_built b WHERE b.queue_id = p_q.queue_id)
                  THEN u.lo ELSE 0 END
      FROM unnest(v_keys, v_mins) AS u(k, lo)
      WHERE u.k = ANY (v_new)
      ORDER BY u.k
      ON CONFLICT (queue_id, partition_key) DO NOTHING
      RETURNING h.partition_key)
    SELECT pg_catalog.array_agg(k) INTO v_contended_new FROM pg_catalog.unnest(v_new) AS k
    WHERE k NOT IN (SELECT made.partition_key FROM made);
    v_contended := v_contended || v_contended_new;
    v_wrote := true;
  END IF;
  IF v_empty IS NOT NULL OR v_low_keys IS NOT NULL THEN
    WITH fixed AS (
      UPDATE outbox.partition_heads h
      SET head_id = COALESCE(h.head_id, u.lo),
          parked_until = CASE WHEN h.head_id IS NULL THEN NULL ELSE h.parked_until END,
          floor_id = LEAST(h.floor_id, u.lo)
      FROM unnest(v_keys, v_mins) AS u(k, lo)
      WHERE h.queue_id = p_q.queue_id AND h.partition_key = u.k
        AND (u.k = ANY (v_empty) OR u.k = ANY (v_low_keys))
        AND h.ctid = ANY (ARRAY(SELECT x.ctid FROM outbox.partition_heads x
                                WHERE x.queue_id = p_q.queue_id
                                  AND (x.partition_key = ANY (v_empty) OR x.partition_key = ANY (v_low_keys))
                                FOR NO KEY UPDATE SKIP LOCKED))
      RETURNING h.partition_key)
    SELECT pg_catalog.array_agg(k) INTO v_contended_new
    FROM pg_catalog.unnest(v_empty || v_low_keys) AS k
    WHERE k NOT IN (SELECT fixed.partition_key FROM fixed);
    v_contended := v_contended || v_contended_new;
    v_wrote := true;
  END IF;
  IF v_contended IS NOT NULL THEN
    INSERT INTO outbox.partition_wakes (queue_id, partition_key, low_id)
    SELECT p_q.queue_id, u.k, u.lo FROM unnest(v_keys, v_mins) AS u(k, lo) WHERE u.k = ANY (v_contended);
    v_wrote := true;
  END IF;
  IF v_wrote THEN
    PERFORM pg_catalog.pg_notify(p_q.channel, p_q.queue);
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
-- commit step: appends the keys with the smallest and largest id of each to transaction-local
-- settings (a rolled back savepoint takes its keys with it, like its rows) and, once per
-- transaction, queues the commit step (outbox.tg_queue__commit) by inserting a row into
-- outbox.commit_hooks. It takes no lock: a producer's INSERT never waits, and what protects its
-- uncommitted rows from a claim that finds their partition empty is the commit step's (see
-- outbox._commit_partitions and outbox._refresh_heads).
-- The settings are only appended to (text, no parsing): a transaction of many statements costs the
-- same per statement whatever it wrote before; the commit step merges repeated keys once.
CREATE OR REPLACE FUNCTION outbox._note_written(p_table oid, p_keys text[], p_mins bigint[], p_maxs bigint[])
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
-- Statement-level AFTER TRUNCATE trigger (pgdrain_truncate) of every queue table: the rows are
-- gone, so is everything derived from them. Deletes the queue's partition heads (they would point
-- at rows that no longer exist, with floors above the ids a RESTART IDENTITY hands out again) and
-- its clocks (they would make every later commit "late") and wake notes, and forgets the keys this transaction
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
  DELETE FROM outbox.partition_wakes w USING outbox.queues q
  WHERE q.table_oid = TG_RELID AND w.queue_id = q.queue_id;
  -- Ids still cached by sessions count as given out before this point (RESTART IDENTITY has already
  -- reset the sequence here, so the base is then where it starts again).
  UPDATE outbox.queues q SET clock_base = COALESCE(pg_catalog.pg_sequence_last_value(q.id_sequence), 0)
  WHERE q.table_oid = TG_RELID;
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

