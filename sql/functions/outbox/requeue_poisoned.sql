-- Operator: gives poisoned rows (all of them, or the given ids) a fresh start: attempt_count 0,
-- due now, last_error kept for the record. Returns how many rows were requeued. On a partitioned
-- queue their partitions' heads move back to them, so per-key order holds again.
CREATE OR REPLACE FUNCTION outbox.requeue_poisoned(queue text, ids bigint[] DEFAULT NULL)
RETURNS bigint
LANGUAGE plpgsql
VOLATILE
SET search_path = ''
AS $$
DECLARE
  fn constant text := 'requeue_poisoned';
  v_q outbox.queues := outbox._queue(fn, queue);
  v_count bigint;
  v_keys text[];
BEGIN
  IF ids IS NOT NULL AND pg_catalog.array_position(ids, NULL) IS NOT NULL THEN
    PERFORM outbox._invalid(fn, 'ids must not contain NULL');
  END IF;
  EXECUTE pg_catalog.format(
    'WITH upd AS (
       UPDATE %s t SET attempt_count = 0, next_attempt_at = NULL, leased_until = NULL, lease_token = NULL
       WHERE t.sent_at IS NULL AND t.attempt_count >= $1 AND ($2::bigint[] IS NULL OR t.id = ANY ($2))
       RETURNING %s AS key)
     SELECT pg_catalog.count(*), pg_catalog.array_agg(DISTINCT upd.key) FROM upd',
    v_q.table_oid::regclass,
    CASE WHEN v_q.partition_column IS NULL THEN 'NULL::text'
         ELSE pg_catalog.format('t.%I::text', v_q.partition_column) END)
    INTO v_count, v_keys USING v_q.max_attempts, ids;
  IF v_q.partition_column IS NOT NULL THEN
    -- The requeued rows may lie below their partitions' floors: search those partitions from 0.
    UPDATE outbox.partition_heads h SET floor_id = 0
    FROM pg_catalog.unnest(v_keys) AS k
    WHERE h.queue_id = v_q.queue_id AND h.partition_key = k;
    PERFORM outbox._refresh_heads(v_q, pg_catalog.array_remove(v_keys, NULL));
  END IF;
  IF v_count > 0 THEN
    PERFORM pg_catalog.pg_notify(v_q.channel, v_q.queue);
  END IF;
  RETURN v_count;
END;
$$;
