-- Recomputes the partition heads of a queue from its pending rows (after adoption, after a change of
-- max_attempts made poisoned rows deliverable again, or after an operator changed rows by hand):
-- floors go back to 0 and every partition with a deliverable row gets its head pointed at it, the
-- same way heads come back after a crash (_restore_heads), here all parts in this transaction. Heads
-- are never deleted here: a producer in flight may own the only rows of a key, and its commit step
-- relies on the head it saw; heads left without rows are dropped by the next claim that looks at
-- them (under the producer lock).
CREATE OR REPLACE FUNCTION outbox._rebuild_heads(p_queue_id integer)
RETURNS void
LANGUAGE plpgsql
VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  v_q outbox.queues;
BEGIN
  SELECT * INTO STRICT v_q FROM outbox.queues q WHERE q.queue_id = p_queue_id;
  PERFORM pg_catalog.pg_advisory_xact_lock(1885823232 + p_queue_id, -1);
  DELETE FROM outbox.partition_heads_built b WHERE b.queue_id = p_queue_id;
  DELETE FROM outbox.partition_heads_restored r WHERE r.queue_id = p_queue_id;
  UPDATE outbox.partition_heads h SET floor_id = 0 WHERE h.queue_id = p_queue_id AND h.floor_id <> 0;
  WHILE NOT EXISTS (SELECT 1 FROM outbox.partition_heads_built b WHERE b.queue_id = p_queue_id) LOOP
    PERFORM outbox._restore_heads(v_q);
  END LOOP;
END;
$$;
