-- Keeps poisoned the rows p_ids that the caller's transaction has just poisoned at the limit it read
-- (attempt_count = p_q.max_attempts) when outbox.create_queue raises max_attempts before it commits.
-- create_queue lifts the rows already poisoned to the new limit, but not rows poisoned by a
-- transaction still open: its statement does not see them, and at the old limit they would be
-- pending again once that transaction commits, in front of the rows of their keys delivered after
-- them (per-key order broken; found with a lock-mode batch that settled a row 'permanent' and
-- stayed open while the owner ran create_queue). The queue's registration row, locked FOR SHARE here
-- until the caller commits, orders the two: create_queue writes it before it lifts, so either it
-- waits for the caller and its lift sees these rows, or the caller waits for it, reads the new
-- limit and lifts them itself. Only a call that poisoned a row comes here.
CREATE OR REPLACE FUNCTION outbox._keep_poisoned(p_q outbox.queues, p_ids bigint[])
RETURNS void
LANGUAGE plpgsql
VOLATILE
SET search_path = pg_catalog, pg_temp
SET enable_seqscan = off
SET jit = off
AS $$
DECLARE
  v_max integer;
BEGIN
  SELECT q.max_attempts INTO v_max FROM outbox.queues q
  WHERE q.queue_id = p_q.queue_id AND q.table_oid = p_q.table_oid
  FOR SHARE;
  IF v_max > p_q.max_attempts THEN
    EXECUTE pg_catalog.format(
      'UPDATE %s t SET attempt_count = $1
       WHERE t.id = ANY ($2) AND t.sent_at IS NULL AND t.attempt_count >= $3 AND t.attempt_count < $1',
      p_q.table_oid::regclass)
      USING v_max, p_ids, p_q.max_attempts;
  END IF;
END;
$$;
