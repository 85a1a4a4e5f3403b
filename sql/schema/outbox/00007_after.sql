-- Every registered queue table gets headers and event_id (nullable, with a default for new rows:
-- no rewrite), then the CHECK on headers and the producers' SELECT (event_id) for RETURNING.
DO $identity$
DECLARE
  q outbox.queues;
BEGIN
  FOR q IN SELECT * FROM outbox.queues x WHERE pg_catalog.pg_table_is_visible(x.table_oid) IS NOT NULL
           ORDER BY x.queue_id LOOP
    EXECUTE pg_catalog.format('ALTER TABLE %s ADD COLUMN IF NOT EXISTS headers jsonb', q.table_oid::regclass);
    PERFORM outbox._add_event_id(q.table_oid::regclass);
    PERFORM outbox._guard_queue_table(q.table_oid::regclass, q.partition_column, true);
  END LOOP;
END;
$identity$;
