-- The operators' actions on a queue's rows (poison_row, retry_row, dismiss_poisoned), newest first:
-- at most max_rows (1..1000), below before_action_id when given (the next page). Each with the
-- login role that acted, its reason, the row's id, event_id, key and attempt count at the time.
CREATE OR REPLACE FUNCTION outbox.operator_log(queue text, max_rows integer DEFAULT 50, before_action_id bigint DEFAULT NULL)
RETURNS TABLE(action_id bigint, acted_at timestamptz, action text, id bigint, event_id uuid, partition_key text,
              attempt_count integer, reason text, acted_by text)
LANGUAGE plpgsql
STABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  fn constant text := 'operator_log';
  v_name text := outbox._queue_name(fn, queue);
BEGIN
  IF max_rows IS NULL OR max_rows < 1 OR max_rows > 1000 THEN
    PERFORM outbox._invalid(fn, pg_catalog.format('max_rows must be between 1 and 1000, got %s',
                                                  COALESCE(max_rows::text, 'NULL')));
  END IF;
  -- By name: the log outlives the queue's registration (drop_queue keeps it).
  RETURN QUERY
    SELECT a.action_id, a.acted_at, a.action, a.row_id, a.event_id, a.partition_key, a.attempt_count, a.reason, a.acted_by
    FROM outbox.operator_actions a
    WHERE a.queue = v_name AND (before_action_id IS NULL OR a.action_id < before_action_id)
    ORDER BY a.action_id DESC
    LIMIT max_rows;
END;
$$;
