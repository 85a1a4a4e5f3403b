-- Commit step of one partitioned queue for the current transaction (called by tg_queue__commit
-- with the transaction's note of the queue, see outbox._note_written): the keys it wrote go to
-- outbox._commit_keys, which makes per-key delivery order equal commit order and gives new keys
-- their partition head. The usual transaction, one row of a key that has a head and not late,
-- is done here in two scalar statements: every statement of the commit step is an executor start
-- on the producer's write path (aggregates and CTEs, which the general step needs, cost the most
-- to start), and so is every planner setting a function pins.
-- Returns whether it wrote a head or a wake note (and notified).
CREATE OR REPLACE FUNCTION outbox._commit_partitions(p_q outbox.queues, p_note outbox.commit_hooks)
RETURNS boolean
LANGUAGE plpgsql
VOLATILE
SET search_path = ''
SET enable_seqscan = off
AS $$
DECLARE
  v_key text;
  v_id bigint;
  v_previous bigint;
  v_head bigint;
  v_floor bigint;
  v_keys text[];
  v_mins bigint[];
  v_maxs bigint[];
BEGIN
  IF pg_catalog.cardinality(p_note.keys) = 1 THEN
    -- The commit lock of the key's hash, taken and the clock raised as outbox._commit_keys does.
    v_key := p_note.keys[1];
    v_id := p_note.ids[1];
    INSERT INTO outbox.partition_clocks AS c (queue_id, slot, committed_max, previous_max)
    VALUES (p_q.queue_id, pg_catalog.hashtext(v_key) & 65535,
            GREATEST(p_q.clock_base, LEAST(v_id, pg_catalog.pg_sequence_last_value(p_q.id_sequence))),
            p_q.clock_base)
    ON CONFLICT (queue_id, slot) DO UPDATE
      SET previous_max = c.committed_max,
          committed_max = GREATEST(c.committed_max, EXCLUDED.committed_max)
    RETURNING c.previous_max INTO v_previous;
    IF v_previous <= v_id AND pg_catalog.current_setting('transaction_isolation') = 'read committed' THEN
      SELECT x.head_id, x.floor_id INTO v_head, v_floor
      FROM outbox.partition_heads x
      WHERE x.queue_id = p_q.queue_id AND x.partition_key = v_key
      FOR KEY SHARE SKIP LOCKED;
      IF v_head IS NOT NULL AND v_floor <= v_id THEN
        RETURN false;
      END IF;
    END IF;
    RETURN outbox._commit_keys(p_q, p_note.keys, p_note.ids, p_note.ids, true);
  END IF;

  -- What the transaction's statements noted: each row's key and id as appended (merged per key
  -- there), or, for a transaction of many statements, its rows in the span (outbox._noted_keys).
  IF p_note.keys IS NOT NULL THEN
    RETURN outbox._commit_keys(p_q, p_note.keys, p_note.ids, p_note.ids, false);
  END IF;
  SELECT pg_catalog.array_agg(n.k), pg_catalog.array_agg(n.lo), pg_catalog.array_agg(n.hi)
    INTO v_keys, v_mins, v_maxs
  FROM outbox._noted_keys(p_q, p_note) n;
  IF v_keys IS NULL THEN
    RETURN false;
  END IF;
  RETURN outbox._commit_keys(p_q, v_keys, v_mins, v_maxs, false);
END;
$$;
