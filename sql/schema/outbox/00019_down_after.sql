CREATE CONSTRAINT TRIGGER pgdrain_commit AFTER INSERT ON outbox.commit_hooks
  DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION outbox.tg_queue__commit();
SELECT outbox._install_heads_trigger(q)
FROM outbox.queues q
WHERE q.partition_column IS NOT NULL AND EXISTS (SELECT 1 FROM pg_catalog.pg_class c WHERE c.oid = q.table_oid)
ORDER BY q.queue_id;
DO $$
DECLARE
  v_q outbox.queues;
BEGIN
  FOR v_q IN
    SELECT * FROM outbox.queues q
    WHERE q.partition_column IS NOT NULL AND EXISTS (SELECT 1 FROM pg_catalog.pg_class c WHERE c.oid = q.table_oid)
    ORDER BY q.queue_id
  LOOP
    EXECUTE pg_catalog.format('DROP TRIGGER IF EXISTS pgdrain_notify ON %s', v_q.table_oid::regclass);
    EXECUTE pg_catalog.format(
      'CREATE TRIGGER pgdrain_notify AFTER INSERT ON %s FOR EACH STATEMENT
         EXECUTE FUNCTION outbox.tg_queue__notify(%L, %L)', v_q.table_oid::regclass, v_q.channel, v_q.queue);
  END LOOP;
END;
$$;
