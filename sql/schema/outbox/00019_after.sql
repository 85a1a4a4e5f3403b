CREATE CONSTRAINT TRIGGER pgdrain_commit AFTER INSERT ON outbox.commit_hooks
  DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION outbox.tg_queue__commit();

-- Registered partitioned queues get the new heads trigger, and lose the NOTIFY trigger: their
-- commit step sends the NOTIFY (only when a partition became claimable), the statement trigger was
-- only ever told to stay quiet.
SELECT outbox._install_heads_trigger(q)
FROM outbox.queues q
WHERE q.partition_column IS NOT NULL AND EXISTS (SELECT 1 FROM pg_catalog.pg_class c WHERE c.oid = q.table_oid)
ORDER BY q.queue_id;
DO $$
DECLARE
  v_table regclass;
BEGIN
  FOR v_table IN
    SELECT q.table_oid::regclass FROM outbox.queues q
    WHERE q.partition_column IS NOT NULL AND EXISTS (SELECT 1 FROM pg_catalog.pg_class c WHERE c.oid = q.table_oid)
    ORDER BY q.queue_id
  LOOP
    EXECUTE pg_catalog.format('DROP TRIGGER IF EXISTS pgdrain_notify ON %s', v_table);
  END LOOP;
END;
$$;
