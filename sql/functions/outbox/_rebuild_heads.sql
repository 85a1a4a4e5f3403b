-- Recomputes the partition heads of a queue from its pending rows (after adoption, or after an
-- operator changed rows by hand): every head is dropped and made again, floors from 0.
-- Partitions with no deliverable row lose their head. Marks the heads complete.
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
  EXECUTE pg_catalog.format(
    'SELECT pg_catalog.array_agg(DISTINCT %I::text) FROM %s WHERE sent_at IS NULL AND attempt_count < $1',
    v_q.partition_column, v_q.table_oid::regclass)
    INTO v_q.channel USING v_q.max_attempts;
  DELETE FROM outbox.partition_heads h WHERE h.queue_id = p_queue_id;
  IF v_q.channel IS NOT NULL THEN
    PERFORM outbox._refresh_heads(v_q, v_q.channel::text[]);
  END IF;
  INSERT INTO outbox.partition_heads_built (queue_id) VALUES (p_queue_id) ON CONFLICT DO NOTHING;
END;
$$;
