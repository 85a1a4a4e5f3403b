-- Queues registered before this migration get the pgdrain_key_fixed trigger (outbox._install_heads_trigger
-- leaves every trigger in place as it is and adds the missing one). A registration whose table is gone
-- is left to create_queue or drop_queue.
DO $$
DECLARE
  v_q outbox.queues;
BEGIN
  FOR v_q IN SELECT q.* FROM outbox.queues q
             WHERE q.partition_column IS NOT NULL
               AND EXISTS (SELECT 1 FROM pg_catalog.pg_class c WHERE c.oid = q.table_oid)
             ORDER BY q.queue_id LOOP
    PERFORM outbox._install_heads_trigger(v_q);
  END LOOP;
END;
$$;
