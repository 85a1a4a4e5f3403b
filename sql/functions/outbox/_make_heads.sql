-- Makes the partition heads of a commit step's new keys (p_keys, p_ids their smallest ids, p_states
-- aligned: only the keys whose state is 'new' are made) and returns the new keys it did not make,
-- which the caller gives wake notes. A head another session made meanwhile is one of them: committed
-- (ON CONFLICT DO NOTHING), or still being made by an open transaction, a claim applying wake notes
-- or rebuilding heads inside a lock-mode batch (outbox._apply_wakes, outbox._restore_heads). The
-- insert would wait on that transaction's index entry until the batch ends (issue 29); it gives up
-- after lock_timeout instead, and makes none of them: a producer never waits for a claim. The
-- subtransaction of the EXCEPTION block is entered only by transactions with new keys.
-- A new head's floor is its smallest id (poisoned rows before it are not walked again) only while
-- the queue's heads are complete and no wake note waits for the key: after a crash "no head" may
-- mean the heads were lost while older rows of the key are still pending, and a note means a
-- producer before us committed rows of the key while a claim was deleting its head (the note is
-- applied by a later claim, which a claim of our row must not overtake). Then the floor is 0 until
-- a claim raises it. So it is under REPEATABLE READ and SERIALIZABLE: their snapshot may miss a
-- note, and not reading the notes keeps a SERIALIZABLE producer's predicate locks off the page
-- other producers' wake notes go to.
CREATE OR REPLACE FUNCTION outbox._make_heads(p_q outbox.queues, p_keys text[], p_ids bigint[], p_states text[])
RETURNS text[]
LANGUAGE plpgsql
VOLATILE
SET search_path = pg_catalog, pg_temp
SET lock_timeout = '1ms'
AS $$
DECLARE
  v_read_committed constant boolean := pg_catalog.current_setting('transaction_isolation') = 'read committed';
  v_floors boolean;
  v_notes boolean;
  v_missed text[];
BEGIN
  -- Asked once per call, not once per key: whether a floor may be the smallest id at all, and
  -- whether any wake note of the queue exists (usually none) before looking for each key's. In
  -- the block, as every read here: a lock timeout on any of them makes no head, never an error.
  v_floors := v_read_committed
    AND EXISTS (SELECT 1 FROM outbox.partition_heads_built b WHERE b.queue_id = p_q.queue_id);
  v_notes := v_floors AND EXISTS (SELECT 1 FROM outbox.partition_wakes w WHERE w.queue_id = p_q.queue_id);
  WITH made AS (
    INSERT INTO outbox.partition_heads AS h (queue_id, partition_key, head_id, floor_id)
    SELECT p_q.queue_id, u.k, u.lo,
           CASE WHEN v_floors
                     AND NOT (v_notes AND EXISTS (SELECT 1 FROM outbox.partition_wakes w
                                                  WHERE w.queue_id = p_q.queue_id AND w.partition_key = u.k))
                THEN u.lo ELSE 0 END
    -- Filtered on the aligned state, not with u.k = ANY (new keys): that compares every key with
    -- every new key (a 192,000-row bulk load of 32,000 new keys spent 9.6 s there).
    FROM unnest(p_keys, p_ids, p_states) AS u(k, lo, state)
    WHERE u.state = 'new'
    ORDER BY u.k
    ON CONFLICT (queue_id, partition_key) DO NOTHING
    RETURNING h.partition_key)
  SELECT pg_catalog.array_agg(u.k) INTO v_missed
  FROM unnest(p_keys, p_states) AS u(k, state)
  WHERE u.state = 'new' AND u.k NOT IN (SELECT made.partition_key FROM made);
  RETURN v_missed;
EXCEPTION WHEN lock_not_available THEN
  SELECT pg_catalog.array_agg(u.k) INTO v_missed
  FROM unnest(p_keys, p_states) AS u(k, state) WHERE u.state = 'new';
  RETURN v_missed;
END;
$$;
