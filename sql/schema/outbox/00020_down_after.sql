-- Unpartitioned queues get 00019's NOTIFY trigger back (two arguments: channel, queue).
DO $$
DECLARE
  r record;
BEGIN
  FOR r IN SELECT q.table_oid::regclass AS rel, q.channel, q.queue FROM outbox.queues q
           WHERE q.partition_column IS NULL
             AND EXISTS (SELECT 1 FROM pg_catalog.pg_class c WHERE c.oid = q.table_oid)
           ORDER BY q.queue_id LOOP
    EXECUTE pg_catalog.format('DROP TRIGGER IF EXISTS pgdrain_notify ON %s', r.rel);
    EXECUTE pg_catalog.format(
      'CREATE TRIGGER pgdrain_notify AFTER INSERT ON %s FOR EACH STATEMENT
         EXECUTE FUNCTION outbox.tg_queue__notify(%L, %L)', r.rel, r.channel, r.queue);
  END LOOP;
END;
$$;
