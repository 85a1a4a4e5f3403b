-- Operator: retries a backing-off row now (ends its backoff; no attempt is counted), e.g. once the
-- peer it failed on is fixed. Fenced by what the operator saw: the row must still be pending, backing
-- off, with that attempt_count, and not be delivered right now (see outbox._operator_act);
-- otherwise false and nothing changed. Logged in outbox.operator_actions (operator_log) and the
-- server log; reason is optional.
CREATE OR REPLACE FUNCTION outbox.retry_row(queue text, id bigint, attempt_count integer, reason text DEFAULT NULL)
RETURNS boolean
LANGUAGE plpgsql
VOLATILE
SET search_path = pg_catalog, pg_temp
-- Row level security that applies to the owner fails the call (42501) instead of hiding rows
-- from it: hidden rows were never delivered and counted nowhere (docs/security.md).
SET row_security = off
AS $$
DECLARE
  fn constant text := 'retry_row';
  v_q outbox.queues := outbox._queue(fn, queue);
BEGIN
  IF retry_row.id IS NULL THEN
    PERFORM outbox._invalid(fn, 'id must not be NULL');
  END IF;
  IF retry_row.attempt_count IS NULL OR retry_row.attempt_count < 0 THEN
    PERFORM outbox._invalid(fn, pg_catalog.format(
      'attempt_count must be the row''s attempt count as last seen (0 or more), got %s',
      COALESCE(retry_row.attempt_count::text, 'NULL')));
  END IF;
  IF reason IS NOT NULL THEN
    PERFORM outbox._check_reason(fn, reason);
  END IF;
  RETURN pg_catalog.cardinality(outbox._operator_act(v_q, 'retry', ARRAY[retry_row.id], retry_row.attempt_count, reason)) = 1;
END;
$$;
