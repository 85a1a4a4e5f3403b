-- The SQL expression, over a queue table aliased t, of a row's event_id: the column, or for a row
-- written before its table had the column (adopted, or registered before migration 00007) a uuid
-- derived from the queue and the row's id, the same on every claim.
CREATE OR REPLACE FUNCTION outbox._event_id_of(p_q outbox.queues)
RETURNS text
LANGUAGE sql
IMMUTABLE
SET search_path = ''
AS $$
  SELECT pg_catalog.format('COALESCE(t.event_id, pg_catalog.md5(%L || t.id::text)::uuid)', p_q.queue || '/');
$$;
