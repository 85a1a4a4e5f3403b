-- Points the head of each given partition at its first deliverable row (smallest id among unsent,
-- not poisoned rows), parked until that row's lease or backoff ends; creates missing heads. A
-- partition with no deliverable row loses its head, unless a producer still holds it (FOR KEY
-- SHARE: its rows are not committed yet), in which case the head is left empty for a later claim.
-- The caller must have written its own changes in an earlier statement, so they are visible here.
CREATE OR REPLACE FUNCTION outbox._refresh_heads(p_q outbox.queues, p_keys text[])
RETURNS void
LANGUAGE plpgsql
VOLATILE
SET search_path = ''
AS $$
DECLARE
  v_empty text[];
BEGIN
  IF p_keys IS NULL OR pg_catalog.cardinality(p_keys) = 0 THEN
    RETURN;
  END IF;
  EXECUTE pg_catalog.format(
    'WITH next AS (
       SELECT k.key, n.id, n.attempt_count,
              NULLIF(GREATEST(n.next_attempt_at, n.leased_until, pg_catalog.now()), pg_catalog.now()) AS parked
       FROM pg_catalog.unnest($1::text[]) AS k(key)
       LEFT JOIN LATERAL (
         SELECT t.id, t.attempt_count, t.next_attempt_at, t.leased_until
         FROM %1$s t
         WHERE t.%2$I = k.key::%3$s AND t.sent_at IS NULL AND t.attempt_count < $2
         ORDER BY t.id LIMIT 1) n ON true),
     upd AS (
       INSERT INTO outbox.partition_heads AS h (queue_id, partition_key, head_id, attempt_count, parked_until)
       SELECT $3, next.key, next.id, next.attempt_count, next.parked FROM next WHERE next.id IS NOT NULL
       ON CONFLICT (queue_id, partition_key) DO UPDATE
         SET head_id = EXCLUDED.head_id, attempt_count = EXCLUDED.attempt_count,
             parked_until = EXCLUDED.parked_until)
     SELECT pg_catalog.array_agg(next.key) FROM next WHERE next.id IS NULL',
    p_q.table_oid::regclass, p_q.partition_column, p_q.partition_type)
    INTO v_empty USING p_keys, p_q.max_attempts, p_q.queue_id;

  IF v_empty IS NOT NULL THEN
    WITH gone AS (
      DELETE FROM outbox.partition_heads h
      WHERE (h.queue_id, h.partition_key) IN (
        SELECT x.queue_id, x.partition_key FROM outbox.partition_heads x
        WHERE x.queue_id = p_q.queue_id AND x.partition_key = ANY (v_empty)
        FOR UPDATE SKIP LOCKED)
      RETURNING h.partition_key)
    UPDATE outbox.partition_heads h SET head_id = NULL, attempt_count = 0, parked_until = NULL
    WHERE h.queue_id = p_q.queue_id AND h.partition_key = ANY (v_empty)
      AND h.partition_key NOT IN (SELECT gone.partition_key FROM gone);
  END IF;
END;
$$;
