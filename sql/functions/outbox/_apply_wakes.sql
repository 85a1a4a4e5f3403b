-- Applies the wake notes producers left for a queue (outbox.partition_wakes, see
-- outbox.tg_queue__commit): a committed row of the note's key whose head a claim held at the
-- time. Each noted partition gets what the producer could not write itself: a head if it has
-- none, an empty head pointed at the row and woken, a floor lowered to the row. Notes of a head
-- that is still held stay for a later claim; a bounded number per call, oldest first.
-- Returns the keys it applied, for the caller to refresh.
-- Never waits for another claim: a head that another open transaction is making (a lock-mode batch
-- that applied a note of the key keeps its new head uncommitted for the whole batch) would hold
-- this insert on its index entry until that batch ends, and every claim of the queue behind it,
-- and two batches each making a head the other wants deadlocked. The insert gives up after 1 ms
-- instead, in a block of its own (entered only when notes make heads), then key by key, and the
-- notes of a head it could not make stay for a later claim.
-- The 1 ms bound is for those row and index-entry waits only, set inside the blocks that catch
-- it: the tables' own locks are taken first, with the caller's lock_timeout. Another session
-- holding or waiting for a lock on the heads table (TRUNCATE, VACUUM FULL, autovacuum truncating
-- its end, LOCK TABLE) is waited for, as by every claim; with the whole function at 1 ms, the
-- statements between the blocks failed the claim with 55P03 instead (a hostile run that truncated
-- the unlogged tables: about 2,000 failed claims).
CREATE OR REPLACE FUNCTION outbox._apply_wakes(p_q outbox.queues)
RETURNS text[]
LANGUAGE plpgsql
VOLATILE
SET search_path = pg_catalog, pg_temp
SET enable_seqscan = off
SET enable_bitmapscan = off
SET plan_cache_mode = force_generic_plan
SET jit = off
AS $$
DECLARE
  v_notes tid[];
  v_keys text[];
  v_lows bigint[];
  v_fixed text[];
  v_made text[];
  v_timeout constant text := pg_catalog.current_setting('lock_timeout');
BEGIN
  SELECT pg_catalog.array_agg(w.ctid) INTO v_notes
  FROM (SELECT x.ctid FROM outbox.partition_wakes x WHERE x.queue_id = p_q.queue_id
        LIMIT 256 FOR UPDATE SKIP LOCKED) w;
  IF v_notes IS NULL THEN
    RETURN NULL;
  END IF;
  SELECT pg_catalog.array_agg(s.k ORDER BY s.k), pg_catalog.array_agg(s.lo ORDER BY s.k)
    INTO v_keys, v_lows
  FROM (SELECT w.partition_key AS k, pg_catalog.min(w.low_id) AS lo FROM outbox.partition_wakes w
        WHERE w.ctid = ANY (v_notes) GROUP BY 1) s;
  LOCK TABLE outbox.partition_heads IN ROW EXCLUSIVE MODE;

  -- Heads we can lock now (or that do not exist: made here) take the note; the others wait.
  -- SKIP LOCKED does not keep the lock from waiting on a head that a transaction that committed
  -- after this statement's snapshot moved and another holds now ("while locking updated version of
  -- tuple"): the lock_timeout ends that wait, and these notes then wait for a later claim (the error
  -- escaped the claim, which failed with 55P03). A block entered only by claims with notes.
  BEGIN
  PERFORM pg_catalog.set_config('lock_timeout', '1ms', true);
  WITH held AS (
    SELECT h.partition_key FROM outbox.partition_heads h
    WHERE h.queue_id = p_q.queue_id AND h.partition_key = ANY (v_keys)
    FOR NO KEY UPDATE SKIP LOCKED),
  fixed AS (
    UPDATE outbox.partition_heads h
    SET head_id = COALESCE(h.head_id, u.lo),
        parked_until = CASE WHEN h.head_id IS NULL THEN NULL ELSE h.parked_until END,
        floor_id = LEAST(h.floor_id, u.lo)
    FROM unnest(v_keys, v_lows) AS u(k, lo)
    WHERE h.queue_id = p_q.queue_id AND h.partition_key = u.k AND u.k IN (SELECT held.partition_key FROM held)
    RETURNING h.partition_key)
  SELECT pg_catalog.array_agg(fixed.partition_key) INTO v_fixed FROM fixed;
  PERFORM pg_catalog.set_config('lock_timeout', v_timeout, true);
  EXCEPTION WHEN lock_not_available THEN  -- (a block's settings end with it)
    v_fixed := NULL;
  END;

  IF EXISTS (SELECT 1 FROM unnest(v_keys) AS u(k)
             WHERE NOT EXISTS (SELECT 1 FROM outbox.partition_heads x
                               WHERE x.queue_id = p_q.queue_id AND x.partition_key = u.k)) THEN
    BEGIN
      PERFORM pg_catalog.set_config('lock_timeout', '1ms', true);
      WITH made AS (
        INSERT INTO outbox.partition_heads AS h (queue_id, partition_key, head_id, floor_id)
        -- Floor 0: notes of the key beyond this call's may hold smaller ids.
        SELECT p_q.queue_id, u.k, u.lo, 0
        FROM unnest(v_keys, v_lows) AS u(k, lo)
        WHERE NOT EXISTS (SELECT 1 FROM outbox.partition_heads x
                          WHERE x.queue_id = p_q.queue_id AND x.partition_key = u.k)
        ORDER BY u.k
        ON CONFLICT (queue_id, partition_key) DO NOTHING
        RETURNING h.partition_key)
      SELECT pg_catalog.array_agg(made.partition_key) INTO v_made FROM made;
      PERFORM pg_catalog.set_config('lock_timeout', v_timeout, true);
    EXCEPTION WHEN lock_not_available THEN
      -- One key by one, so that the head another transaction is making holds back only its key.
      v_made := NULL;
      FOR i IN 1..pg_catalog.cardinality(v_keys) LOOP
        BEGIN
          PERFORM pg_catalog.set_config('lock_timeout', '1ms', true);
          INSERT INTO outbox.partition_heads AS h (queue_id, partition_key, head_id, floor_id)
          SELECT p_q.queue_id, v_keys[i], v_lows[i], 0
          WHERE NOT EXISTS (SELECT 1 FROM outbox.partition_heads x
                            WHERE x.queue_id = p_q.queue_id AND x.partition_key = v_keys[i])
          ON CONFLICT (queue_id, partition_key) DO NOTHING;
          IF FOUND THEN
            v_made := v_made || v_keys[i];
          END IF;
          PERFORM pg_catalog.set_config('lock_timeout', v_timeout, true);
        EXCEPTION WHEN lock_not_available THEN
          NULL;
        END;
      END LOOP;
    END;
  END IF;

  v_fixed := v_fixed || v_made;
  DELETE FROM outbox.partition_wakes w
  WHERE w.ctid = ANY (v_notes) AND w.partition_key = ANY (v_fixed);
  RETURN v_fixed;
END;
$$;
