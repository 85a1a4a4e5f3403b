-- Makes the partition heads of a commit step's new keys (p_keys, p_ids their smallest ids, p_states
-- aligned: only the keys whose state is 'new' are made) and returns the new keys it did not make,
-- which the caller gives wake notes. A head another session made meanwhile is one of them: committed
-- (ON CONFLICT DO NOTHING), or still being made by an open transaction, a claim applying wake notes
-- or rebuilding heads inside a lock-mode batch (outbox._apply_wakes, outbox._restore_heads). The
-- insert would wait on that transaction's index entry until the batch ends (issue 29); it gives up
-- after 1 ms instead: a producer never waits for a claim.
-- A timeout gives up only the keys it must. The first try inserts every new key in one statement;
-- on a timeout the keys are halved and each half tried again in a block of its own, breadth first
-- (a queue of spans, each level in key order), down to the keys another transaction holds. All of
-- them got wake notes before, whatever the wait was: a CI run's bulk load of 13,333 new keys got
-- as many notes (a moment's wait on the table, its extension lock beside VACUUM, is the likeliest
-- cause), and the claims that applied them read 8 times the buffers. At most 32 tries time out
-- (65-97 ms measured on 2 cores; a stalled table costs no more), then the spans still queued get
-- notes: breadth first, those are the last level's spans around the held keys. Depth first (a
-- stack), the timeouts isolated the first held keys one by one and the cap left clean spans
-- untried: 6 held keys among 600 new keys noted 274 keys, a run of 100 held keys in 2,000 (a
-- rebuild part is a run of keys) 1,051, a run of 40 before 1,000 others all 1,040; breadth first
-- 51, 117 and 41 (TestMakeHeads_HeldKeysLeaveTheOtherNewKeysTheirHeads). Its limit: held keys
-- spread widely (more than a handful, far apart in key order) use up the 32 timeouts at the first
-- levels, and most keys then get notes, as they all did before; and the tries that time out are
-- inserted again, so a bulk load of 13,333 new keys with one key held at its end commits in about
-- 640 ms instead of 180-230 (a review's measurement). Each try that succeeds is a committed
-- subtransaction (about 20 at most here): a transaction whose commit step passes 64 of them (two
-- queues with held keys) overflows its subtransaction cache while it commits. The blocks are
-- entered only by transactions with new keys, one unless a try times out.
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
AS $$
DECLARE
  v_read_committed constant boolean := pg_catalog.current_setting('transaction_isolation') = 'read committed';
  v_timeout constant text := pg_catalog.current_setting('lock_timeout');
  v_keys text[];
  v_ids bigint[];
  v_floors boolean;
  v_notes boolean;
  v_spans int[] := '{}';  -- a queue of [first, last] spans of v_keys still to try
  v_first int;
  v_last int;
  v_half int;
  v_timeouts int := 0;
  v_missed text[];
BEGIN
  SELECT pg_catalog.array_agg(u.k ORDER BY u.k), pg_catalog.array_agg(u.lo ORDER BY u.k)
    INTO v_keys, v_ids
  -- Filtered on the aligned state, not with u.k = ANY (new keys): that compares every key with
  -- every new key (a 192,000-row bulk load of 32,000 new keys spent 9.6 s there).
  FROM unnest(p_keys, p_ids, p_states) AS u(k, lo, state)
  WHERE u.state = 'new';
  IF v_keys IS NULL THEN
    RETURN NULL;
  END IF;
  -- Asked once per call, not once per key: whether a floor may be the smallest id at all, and
  -- whether any wake note of the queue exists (usually none) before looking for each key's.
  v_floors := v_read_committed
    AND EXISTS (SELECT 1 FROM outbox.partition_heads_built b WHERE b.queue_id = p_q.queue_id);
  v_notes := v_floors AND EXISTS (SELECT 1 FROM outbox.partition_wakes w WHERE w.queue_id = p_q.queue_id);

  v_spans := ARRAY[1, pg_catalog.cardinality(v_keys)];
  WHILE pg_catalog.cardinality(v_spans) > 0 LOOP
    v_first := v_spans[1];
    v_last := v_spans[2];
    v_spans := v_spans[3:];
    IF v_timeouts >= 32 THEN
      v_missed := v_missed || v_keys[v_first:v_last];
      CONTINUE;
    END IF;
    BEGIN
      PERFORM pg_catalog.set_config('lock_timeout', '1ms', true);
      WITH made AS (
        INSERT INTO outbox.partition_heads AS h (queue_id, partition_key, head_id, floor_id)
        SELECT p_q.queue_id, u.k, u.lo,
               CASE WHEN v_floors
                         AND NOT (v_notes AND EXISTS (SELECT 1 FROM outbox.partition_wakes w
                                                      WHERE w.queue_id = p_q.queue_id AND w.partition_key = u.k))
                    THEN u.lo ELSE 0 END
        FROM unnest(v_keys[v_first:v_last], v_ids[v_first:v_last]) AS u(k, lo)
        ORDER BY u.k
        ON CONFLICT (queue_id, partition_key) DO NOTHING
        RETURNING h.partition_key)
      SELECT v_missed || pg_catalog.array_agg(u.k) INTO v_missed
      FROM unnest(v_keys[v_first:v_last]) AS u(k)
      WHERE u.k NOT IN (SELECT made.partition_key FROM made);
      PERFORM pg_catalog.set_config('lock_timeout', v_timeout, true);
    EXCEPTION WHEN lock_not_available THEN  -- (a block's settings end with it)
      v_timeouts := v_timeouts + 1;
      IF v_first = v_last THEN
        v_missed := v_missed || v_keys[v_first];
      ELSE
        -- Queued lower half first: each level's spans are tried in key order.
        v_half := (v_first + v_last) / 2;
        v_spans := v_spans || ARRAY[v_first, v_half, v_half + 1, v_last];
      END IF;
    END;
  END LOOP;
  RETURN v_missed;
END;
$$;
