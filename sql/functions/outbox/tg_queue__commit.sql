-- The commit step of producers: the constraint trigger pgdrain_commit on outbox.commit_hooks
-- (DEFERRABLE INITIALLY DEFERRED), whose row outbox._note_written inserts once per transaction,
-- so it fires once, at COMMIT, after the transaction's last statement. It hands every partitioned
-- queue the transaction wrote to outbox._commit_partitions in queue_id order: the commit locks of
-- all transactions are then taken in one global order, and committing transactions never deadlock.
-- SET CONSTRAINTS outbox.pgdrain_commit IMMEDIATE runs it earlier (its locks are then held until
-- the transaction ends); rows written after that queue it again.
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
  DELETE FROM outbox.commit_hooks h WHERE h.xid = pg_catalog.pg_current_xact_id();
  PERFORM pg_catalog.set_config('pgdrain.commit_armed', '', true),
          pg_catalog.set_config('pgdrain.commit_queues', '', true);
  IF v_queues IS NULL THEN
    RETURN NULL;
  END IF;
  FOR v_q IN
    SELECT * FROM outbox.queues q
    WHERE q.table_oid::text = ANY (v_queues::text[]) AND q.partition_column IS NOT NULL
      -- The transaction may have dropped the table it wrote: nothing of it is left to order.
      AND pg_catalog.pg_table_is_visible(q.table_oid) IS NOT NULL
    ORDER BY q.queue_id
  LOOP
    PERFORM outbox._commit_partitions(v_q);
  END LOOP;
  RETURN NULL;
END;
$$;
