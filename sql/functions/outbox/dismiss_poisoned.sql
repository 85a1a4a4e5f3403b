-- Operator: dismisses poisoned rows for good: never delivered, kept as history (sent_at set, so
-- they count neither as pending nor as poisoned; last_error says who dismissed them and why;
-- purge_sent removes them with the sent rows). Only rows that are still poisoned and not being
-- delivered right now are taken (see outbox._operator_act); returns how many. Logged in
-- outbox.operator_actions (operator_log) and the server log.
CREATE OR REPLACE FUNCTION outbox.dismiss_poisoned(queue text, ids bigint[], reason text)
RETURNS bigint
LANGUAGE plpgsql
VOLATILE
SET search_path = pg_catalog, pg_temp
-- Row level security that applies to the owner fails the call (42501) instead of hiding rows
-- from it: hidden rows were never delivered and counted nowhere (docs/security.md).
SET row_security = off
AS $$
DECLARE
  fn constant text := 'dismiss_poisoned';
  v_q outbox.queues := outbox._queue(fn, queue);
BEGIN
  IF ids IS NULL OR pg_catalog.cardinality(ids) NOT BETWEEN 1 AND 10000 THEN
    PERFORM outbox._invalid(fn, pg_catalog.format('ids must have between 1 and 10000 elements, got %s',
                                                  COALESCE(pg_catalog.cardinality(ids)::text, 'NULL')));
  END IF;
  PERFORM outbox._check_one_dimension(fn, 'ids', pg_catalog.array_ndims(ids));
  IF pg_catalog.array_position(ids, NULL) IS NOT NULL THEN
    PERFORM outbox._invalid(fn, 'ids must not contain NULL');
  END IF;
  PERFORM outbox._check_reason(fn, reason);
  RETURN pg_catalog.cardinality(outbox._operator_act(v_q, 'dismiss', ids, NULL, reason));
END;
$$;
