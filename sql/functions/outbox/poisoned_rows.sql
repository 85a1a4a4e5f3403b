-- The poisoned rows of a queue for an operator's page: newest first, at most max_rows (1..1000),
-- below before_id when given (the next page). Read through the claim index (attempt_count at
-- max_attempts among unsent rows), so a page never walks the pending backlog. payload_preview (the
-- payload's first 200 characters) only for a caller whose login role may read the queue table's
-- payload column; NULL otherwise (operators are not granted payloads, docs/security.md).
CREATE OR REPLACE FUNCTION outbox.poisoned_rows(queue text, max_rows integer DEFAULT 50, before_id bigint DEFAULT NULL)
RETURNS TABLE(id bigint, event_id uuid, event_type text, partition_key text, attempt_count integer,
              last_error text, created_at timestamptz, payload_preview text)
LANGUAGE plpgsql
STABLE
SET search_path = pg_catalog, pg_temp
SET enable_seqscan = off
SET enable_bitmapscan = off
AS $$
DECLARE
  fn constant text := 'poisoned_rows';
  v_q outbox.queues := outbox._queue(fn, queue);
  v_payload boolean;
BEGIN
  IF max_rows IS NULL OR max_rows < 1 OR max_rows > 1000 THEN
    PERFORM outbox._invalid(fn, pg_catalog.format('max_rows must be between 1 and 1000, got %s',
                                                  COALESCE(max_rows::text, 'NULL')));
  END IF;
  v_payload := pg_catalog.has_column_privilege(session_user, v_q.table_oid, 'payload', 'SELECT');
  RETURN QUERY EXECUTE pg_catalog.format(
    'SELECT t.id, %s, t.event_type, %s, t.attempt_count, t.last_error, t.created_at,
            CASE WHEN $4 THEN pg_catalog.left(t.payload::text, 200) END
     FROM %s t
     WHERE t.sent_at IS NULL AND t.attempt_count >= $1 AND ($2::bigint IS NULL OR t.id < $2)
     ORDER BY t.attempt_count DESC, t.id DESC LIMIT $3',
    outbox._event_id_of(v_q),
    CASE WHEN v_q.partition_column IS NULL THEN 'NULL::text'
         ELSE pg_catalog.format('t.%I::text', v_q.partition_column) END,
    v_q.table_oid::regclass)
    USING v_q.max_attempts, before_id, max_rows, v_payload;
END;
$$;
