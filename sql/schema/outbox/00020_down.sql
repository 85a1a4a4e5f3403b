-- Back to 00019: producers always notify.
DO $$
DECLARE
  r record;
BEGIN
  FOR r IN SELECT c.oid::regclass AS seq FROM pg_catalog.pg_class c
           WHERE c.relnamespace = 'outbox'::regnamespace AND c.relkind = 'S'
             AND c.relname LIKE 'drainer\_waits\_q%' LOOP
    EXECUTE pg_catalog.format('DROP SEQUENCE %s', r.seq);
  END LOOP;
END;
$$;
DROP FUNCTION outbox.set_notify(text, text);
DROP FUNCTION outbox.drainer_waits(text, interval);
DROP FUNCTION outbox.drainer_woke(text, bigint);
DROP FUNCTION outbox._drainer_waits(outbox.queues);
DROP FUNCTION outbox._install_notify_trigger(outbox.queues);
ALTER TABLE outbox.queues DROP COLUMN notify;
