-- Recomputes the partition heads of a queue from its pending rows (after adoption, or after an
-- operator changed rows by hand): every head is dropped and made again, floors from 0, the same way
-- heads come back after a crash (_restore_heads). Partitions with no deliverable row lose their
-- head. Marks the heads complete.
CREATE OR REPLACE FUNCTION outbox._rebuild_heads(p_queue_id integer)
RETURNS void
LANGUAGE plpgsql
VOLATILE
SET search_path = ''
AS $$
DECLARE
  v_q outbox.queues;
BEGIN
  SELECT * INTO STRICT v_q FROM outbox.queues q WHERE q.queue_id = p_queue_id;
  DELETE FROM outbox.partition_heads h WHERE h.queue_id = p_queue_id;
  DELETE FROM outbox.partition_heads_built b WHERE b.queue_id = p_queue_id;
  PERFORM outbox._restore_heads(v_q);
END;
$$;
