-- Commit step of one partitioned queue for the current transaction (called by tg_queue__commit
-- with the key and id of every row the transaction noted in the queue, see outbox._note_written,
-- aligned, a key may repeat): the keys it wrote go to
-- outbox._commit_keys, which makes per-key delivery order equal commit order and gives new keys
-- their partition head. The usual transactions, one row of a key that has a head or of a new key,
-- not late, are done here in scalar statements (the lock, the lateness question of READ
-- COMMITTED, the head, a new key's insert): every statement of the commit step is an executor
-- start on the producer's write path (aggregates and CTEs, which the general step needs, cost the
-- most to start), and so is every planner setting a function pins.
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
  v_head bigint;
  v_floor bigint;
  v_isolation constant text := pg_catalog.current_setting('transaction_isolation');
  v_read_committed constant boolean := v_isolation = 'read committed';
  v_write_clock boolean;
  v_sure boolean;
BEGIN
  -- SERIALIZABLE: outbox._commit_keys, which reads nothing other producers write.
  IF pg_catalog.cardinality(p_keys) = 1 AND v_isolation <> 'serializable' THEN
    -- The commit lock of the key's hash, taken as outbox._commit_keys takes it: in READ COMMITTED
    -- without writing the clock (unless a REPEATABLE READ or SERIALIZABLE producer may need it),
    -- lateness then read from the queue table; in REPEATABLE READ with the clock raised.
    v_key := p_keys[1];
    v_id := p_ids[1];
    v_write_clock := NOT v_read_committed OR outbox._snapshot_producers_open(p_q.queue_id);
    INSERT INTO outbox.partition_clocks AS c (queue_id, slot, committed_max, previous_max)
    VALUES (p_q.queue_id, pg_catalog.hashtext(v_key) & 65535,
            GREATEST(p_q.clock_base, LEAST(v_id, pg_catalog.pg_sequence_last_value(p_q.id_sequence))),
            p_q.clock_base)
    ON CONFLICT (queue_id, slot) DO UPDATE
      SET previous_max = c.committed_max,
          committed_max = GREATEST(c.committed_max, EXCLUDED.committed_max)
      WHERE v_write_clock;
    IF NOT v_read_committed THEN
      RETURN outbox._commit_keys(p_q, p_keys, p_ids, p_ids, true);
    END IF;
    -- A new statement: its snapshot sees every commit that released the lock. Late when another
    -- transaction committed a row of the key with a larger id (outbox._late_rows). Asked before the
    -- head is read: a claim may raise the floor of a head we hold (docs/ordering.md, "One floor raise
    -- needs no lock") only by moving it on to a row that our question, coming first, sees pending.
    -- No id given out since ours (read under the lock): nobody committed a larger one, no question.
    IF pg_catalog.pg_sequence_last_value(p_q.id_sequence) > v_id
       AND (outbox._late_rows(p_q, p_keys, p_ids, p_ids))[1] IS NOT NULL THEN
      RETURN outbox._commit_keys(p_q, p_keys, p_ids, p_ids, true);
    END IF;
    -- The head, held until we commit (none when a claim holds it).
    SELECT x.head_id, x.floor_id INTO v_head, v_floor
    FROM outbox.partition_heads x
    WHERE x.queue_id = p_q.queue_id AND x.partition_key = v_key
    FOR KEY SHARE SKIP LOCKED;
    IF FOUND THEN
      -- A head with rows below a floor that is not above us (the usual case for a key with a
      -- backlog): done. Else a head to wake or a floor to lower.
      IF v_head IS NOT NULL AND v_floor <= v_id THEN
        RETURN false;
      END IF;
      RETURN outbox._commit_keys(p_q, p_keys, p_ids, p_ids, true);
    END IF;
    -- A head that exists (a claim holds it) is left to outbox._commit_keys, also one a claim's open
    -- transaction deleted: the probe above skips it (locked), this snapshot still sees it, and an
    -- insert of the key would wait on that transaction's index entry (issue 29: a lock-mode batch
    -- that delivered a key's last row held its producers at COMMIT).
    IF EXISTS (SELECT 1 FROM outbox.partition_heads x WHERE x.queue_id = p_q.queue_id AND x.partition_key = v_key) THEN
      RETURN outbox._commit_keys(p_q, p_keys, p_ids, p_ids, true);
    END IF;
    -- A new key (the other usual case). Its floor is its id only while the queue's heads are
    -- complete and no wake note waits for the key (the reasons are on outbox._make_heads).
    v_sure := EXISTS (SELECT 1 FROM outbox.partition_heads_built b WHERE b.queue_id = p_q.queue_id)
              AND NOT EXISTS (SELECT 1 FROM outbox.partition_wakes w
                              WHERE w.queue_id = p_q.queue_id AND w.partition_key = v_key);
    -- Its head, made as outbox._commit_keys makes it.
    IF NOT outbox._make_head(p_q.queue_id, v_key, v_id, CASE WHEN v_sure THEN v_id ELSE 0 END) THEN
      -- Made meanwhile by another session, maybe a claim's open transaction: a wake note.
      INSERT INTO outbox.partition_wakes (queue_id, partition_key, low_id) VALUES (p_q.queue_id, v_key, v_id);
    END IF;
    IF outbox._drainer_waits(p_q) THEN
      PERFORM pg_catalog.pg_notify(p_q.channel, p_q.queue);
    END IF;
    RETURN true;
  END IF;

  RETURN outbox._commit_keys(p_q, p_keys, p_ids, p_ids, false);
END;
$$;
