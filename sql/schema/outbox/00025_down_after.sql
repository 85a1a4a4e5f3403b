-- The one-row commit step as 00024 made it (00025 moved it into outbox.tg_queue__commit).
-- Commit step of one partitioned queue for the current transaction (called by tg_queue__commit
-- with the key and id of every row the transaction noted in the queue, see outbox._note_written,
-- aligned, a key may repeat): the keys it wrote go to
-- outbox._commit_keys, which makes per-key delivery order equal commit order and gives new keys
-- their partition head. The usual transactions, one row of a key that has a head or of a new key,
-- not late, are done here in two or three scalar statements: every statement of the commit step is an executor start
-- on the producer's write path (aggregates and CTEs, which the general step needs, cost the most
-- to start), and so is every planner setting a function pins.
-- Returns whether it wrote a head or a wake note (and notified).
CREATE OR REPLACE FUNCTION outbox._commit_partitions(p_q outbox.queues, p_keys text[], p_ids bigint[])
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
BEGIN
  -- SERIALIZABLE: outbox._commit_keys, which reads nothing other producers write.
  IF pg_catalog.cardinality(p_keys) = 1 AND pg_catalog.current_setting('transaction_isolation') <> 'serializable' THEN
    -- The commit lock of the key's hash, taken and the clock raised as outbox._commit_keys does.
    v_key := p_keys[1];
    v_id := p_ids[1];
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
      -- A new key (the other usual case): its head, made as outbox._commit_keys makes it. A head
      -- that exists (a claim holds it, or it needs a fix) is left to outbox._commit_keys, also one
      -- a claim's open transaction deleted: the probe above skips it (locked), this snapshot still
      -- sees it, and an insert of the key would wait on that transaction's index entry (issue 29: a
      -- lock-mode batch that delivered a key's last row held its producers at COMMIT).
      IF NOT FOUND AND NOT EXISTS (SELECT 1 FROM outbox.partition_heads x
                                   WHERE x.queue_id = p_q.queue_id AND x.partition_key = v_key) THEN
        INSERT INTO outbox.partition_heads AS h (queue_id, partition_key, head_id, floor_id)
        SELECT p_q.queue_id, v_key, v_id,
               CASE WHEN EXISTS (SELECT 1 FROM outbox.partition_heads_built b WHERE b.queue_id = p_q.queue_id)
                         AND NOT EXISTS (SELECT 1 FROM outbox.partition_wakes w
                                         WHERE w.queue_id = p_q.queue_id AND w.partition_key = v_key)
                    THEN v_id ELSE 0 END
        ON CONFLICT (queue_id, partition_key) DO NOTHING;
        IF FOUND THEN
          IF outbox._drainer_waits(p_q) THEN
            PERFORM pg_catalog.pg_notify(p_q.channel, p_q.queue);
          END IF;
          RETURN true;
        END IF;
      END IF;
    END IF;
    RETURN outbox._commit_keys(p_q, p_keys, p_ids, p_ids, true);
  END IF;

  RETURN outbox._commit_keys(p_q, p_keys, p_ids, p_ids, false);
END;
$$;

-- The NOTIFY triggers as 00024 made them (the waiting sequence by oid), no CHECK on next_attempt_at,
-- and the heads triggers as 00024 made them (notes in outbox.commit_notes only), without
-- pgdrain_snapshot.
DO $$
DECLARE
  v_q outbox.queues;
BEGIN
  FOR v_q IN SELECT * FROM outbox.queues q
             WHERE EXISTS (SELECT 1 FROM pg_catalog.pg_class c WHERE c.oid = q.table_oid)
             ORDER BY q.queue_id LOOP
    PERFORM outbox._install_notify_trigger(v_q);
    EXECUTE pg_catalog.format('ALTER TABLE %s DROP CONSTRAINT IF EXISTS pgdrain_next_attempt_at_within_max_delay',
                              v_q.table_oid::regclass);
    IF v_q.partition_column IS NOT NULL THEN
      PERFORM outbox._install_heads_trigger(v_q);
      EXECUTE pg_catalog.format('DROP TRIGGER IF EXISTS pgdrain_snapshot ON %s', v_q.table_oid::regclass);
    END IF;
  END LOOP;
END;
$$;
