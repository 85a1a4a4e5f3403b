-- Operator: skips a row that will never succeed (a head a peer rejects for ever with a transient
-- error wedges its key): poisons it with a reason, so its key's later rows are delivered past it;
-- requeue_poisoned delivers it later, at the tail of its key. Fenced by what the operator saw: the
-- row must still be pending with that attempt_count (wedged_partitions' head_attempt_count) and
-- not be delivered right now (see outbox._operator_act); otherwise false and nothing changed.
-- Logged in outbox.operator_actions (operator_log) and the server log.
CREATE OR REPLACE FUNCTION outbox.poison_row(queue text, id bigint, attempt_count integer, reason text)
RETURNS boolean
LANGUAGE plpgsql
VOLATILE
SET search_path = pg_catalog, pg_temp
-- Row level security that applies to the owner fails the call (42501) instead of hiding rows
-- from it: hidden rows were never delivered and counted nowhere (docs/security.md).
SET row_security = off
AS $$
DECLARE
  fn constant text := 'poison_row';
  v_q outbox.queues := outbox._queue(fn, queue);
BEGIN
  IF poison_row.id IS NULL THEN
    PERFORM outbox._invalid(fn, 'id must not be NULL');
  END IF;
  IF poison_row.attempt_count IS NULL OR poison_row.attempt_count < 0 THEN
    PERFORM outbox._invalid(fn, pg_catalog.format(
      'attempt_count must be the row''s attempt count as last seen (0 or more), got %s',
      COALESCE(poison_row.attempt_count::text, 'NULL')));
  END IF;
  PERFORM outbox._check_reason(fn, reason);
  RETURN pg_catalog.cardinality(outbox._operator_act(v_q, 'poison', ARRAY[poison_row.id], poison_row.attempt_count, reason)) = 1;
END;
$$;
