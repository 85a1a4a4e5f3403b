-- The commit step of producers: a constraint trigger (pgdrain_commit, DEFERRABLE INITIALLY
-- DEFERRED) queued once per transaction by its WHEN clause, so it fires once, at COMMIT, after the
-- transaction's last statement. It hands every partitioned queue the transaction wrote (noted by
-- outbox.tg_queue__heads) to outbox._commit_partitions, in queue_id order: the commit locks of all
-- transactions are then taken in one global order, and committing transactions never deadlock.
CREATE OR REPLACE FUNCTION outbox.tg_queue__commit()
RETURNS trigger
LANGUAGE plpgsql
SET search_path = ''
SET jit = off
AS $$
DECLARE
  v_queues text := NULLIF(pg_catalog.current_setting('pgdrain.commit_queues', true), '');
  v_q outbox.queues;
BEGIN
  -- Disarmed first: rows written after an early firing (SET CONSTRAINTS ... IMMEDIATE) queue it again.
  PERFORM pg_catalog.set_config('pgdrain.commit_armed', '', true),
          pg_catalog.set_config('pgdrain.commit_queues', '', true);
  IF v_queues IS NULL THEN
    RETURN NULL;
  END IF;
  FOR v_q IN
    SELECT * FROM outbox.queues q
    WHERE q.table_oid::text = ANY (v_queues::text[]) AND q.partition_column IS NOT NULL
    ORDER BY q.queue_id
  LOOP
    PERFORM outbox._commit_partitions(v_q);
  END LOOP;
  RETURN NULL;
END;
$$;
