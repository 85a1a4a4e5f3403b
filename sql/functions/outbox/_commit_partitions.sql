-- Commit step of one partitioned queue for the current transaction (called by tg_queue__commit):
-- makes per-key delivery order equal commit order, and gives new keys their partition head.
--
-- 1. Takes the commit lock of every partition slot the transaction wrote, exclusively, in slot
--    order, held until the commit is complete (advisory lock (1885823232 + queue_id, 1024 + slot));
--    more than 64 slots take the queue's whole commit lock (objid 2048) instead, so a bulk insert
--    does not fill the lock table. Commits that share a slot are therefore serialised from here on,
--    and nothing else waits for these locks, so they can not deadlock.
-- 2. A key is late when a transaction that committed before us wrote a row of it (or of a key
--    with the same 16-bit hash) with a larger id than our smallest: outbox.partition_clocks keeps
--    the largest committed id per hash, written only under these locks. A late key's rows of this
--    transaction get new ids from the id sequence, in their order, larger than every id already
--    given out: delivered order (id order) is then commit order. Not late (the usual case): no row
--    is written twice.
-- 3. Creates the heads of new keys (no waiting on producers: heads are created only here, under the
--    slot lock), wakes a head a claim left empty while we were open, and lowers a floor that lies
--    above our rows; NOTIFY when a partition became claimable.
-- 4. Raises the clocks to our largest ids.
--
-- Under REPEATABLE READ or SERIALIZABLE the clocks are read in the transaction's snapshot; when
-- another producer of the same hash committed after it, raising the clock fails with
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
  v_slots integer[];
  v_late text[];
  v_new text[];
  v_empty text[];
  v_low record;
BEGIN
  PERFORM pg_catalog.set_config(v_setting || '_keys', '', true),
          pg_catalog.set_config(v_setting || '_mins', '', true),
          pg_catalog.set_config(v_setting || '_maxs', '', true);
  IF v_keys IS NULL THEN
    RETURN;
  END IF;

  SELECT pg_catalog.array_agg(DISTINCT pg_catalog.hashtext(k) & 1023) INTO v_slots
  FROM pg_catalog.unnest(v_keys) AS k;
  IF pg_catalog.cardinality(v_slots) > 64 THEN
    PERFORM pg_catalog.pg_advisory_xact_lock(1885823232 + p_q.queue_id, 2048);
  ELSE
    PERFORM pg_catalog.pg_advisory_xact_lock_shared(1885823232 + p_q.queue_id, 2048);
    PERFORM pg_catalog.pg_advisory_xact_lock(1885823232 + p_q.queue_id, 1024 + s.slot)
    FROM (SELECT pg_catalog.unnest(v_slots) AS slot ORDER BY 1) s;
  END IF;

  -- A new statement: in READ COMMITTED its snapshot sees every commit that released these locks.
  SELECT pg_catalog.array_agg(u.k ORDER BY u.k) INTO v_late
  FROM unnest(v_keys, v_mins) AS u(k, lo)
  WHERE EXISTS (SELECT 1 FROM outbox.partition_clocks c
                WHERE c.queue_id = p_q.queue_id AND c.slot = pg_catalog.hashtext(u.k) & 65535
                  AND c.committed_max > u.lo);
  IF v_late IS NOT NULL THEN
    SELECT pg_catalog.array_agg(u.k ORDER BY u.k),
           pg_catalog.array_agg(COALESCE(r.lo, u.lo) ORDER BY u.k),
           pg_catalog.array_agg(COALESCE(r.hi, u.hi) ORDER BY u.k)
      INTO v_keys, v_mins, v_maxs
    FROM unnest(v_keys, v_mins, v_maxs) AS u(k, lo, hi)
    LEFT JOIN outbox._renumber_late_rows(p_q, v_late,
                (SELECT pg_catalog.array_agg(x.lo ORDER BY x.k) FROM unnest(v_keys, v_mins) AS x(k, lo)
                 WHERE x.k = ANY (v_late)),
                (SELECT pg_catalog.array_agg(x.hi ORDER BY x.k) FROM unnest(v_keys, v_maxs) AS x(k, hi)
                 WHERE x.k = ANY (v_late))) r ON r.k = u.k;
  END IF;

  -- Heads: one probe per key. New keys get theirs (in key order; DO NOTHING covers a head this
  -- transaction's own claims made). A floor above our rows (only possible for ids given explicitly
  -- or without a sequence) is lowered, one key at a time in key order.
  SELECT pg_catalog.array_agg(u.k ORDER BY u.k) FILTER (WHERE NOT h.found),
         pg_catalog.array_agg(u.k ORDER BY u.k) FILTER (WHERE h.found AND h.head_id IS NULL)
    INTO v_new, v_empty
  FROM pg_catalog.unnest(v_keys) AS u(k)
  LEFT JOIN LATERAL (SELECT true AS found, x.head_id FROM outbox.partition_heads x
                     WHERE x.queue_id = p_q.queue_id AND x.partition_key = u.k) h0 ON true
  CROSS JOIN LATERAL (SELECT COALESCE(h0.found, false) AS found, h0.head_id) h;
  -- A head left empty and parked by a claim that ran while we were open: wake it for our rows.
  IF v_empty IS NOT NULL THEN
    UPDATE outbox.partition_heads h SET head_id = u.lo, parked_until = NULL
    FROM unnest(v_keys, v_mins) AS u(k, lo)
    WHERE u.k = ANY (v_empty) AND h.queue_id = p_q.queue_id AND h.partition_key = u.k
      AND h.head_id IS NULL;
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
  FOR v_low IN
    SELECT u.k, u.lo FROM unnest(v_keys, v_mins) AS u(k, lo)
    WHERE EXISTS (SELECT 1 FROM outbox.partition_heads x
                  WHERE x.queue_id = p_q.queue_id AND x.partition_key = u.k AND x.floor_id > u.lo)
    ORDER BY u.k
  LOOP
    UPDATE outbox.partition_heads h SET floor_id = v_low.lo
    WHERE h.queue_id = p_q.queue_id AND h.partition_key = v_low.k AND h.floor_id > v_low.lo;
  END LOOP;

  INSERT INTO outbox.partition_clocks AS c (queue_id, slot, committed_max)
  SELECT p_q.queue_id, pg_catalog.hashtext(u.k) & 65535, pg_catalog.max(u.hi)
  FROM unnest(v_keys, v_maxs) AS u(k, hi)
  GROUP BY 2 ORDER BY 2
  ON CONFLICT (queue_id, slot) DO UPDATE
    SET committed_max = GREATEST(c.committed_max, EXCLUDED.committed_max);
END;
$$;
