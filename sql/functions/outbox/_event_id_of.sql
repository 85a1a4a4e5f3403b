-- The SQL expression, over a queue table aliased t, of a row's event_id: the column, or for a row
-- written before its table had the column (adopted, or registered before migration 00007) a uuid
-- derived from the queue and the row's id, the same on every claim.
-- PL/pgSQL, not SQL: a SQL function with a SET clause is never inlined, and is parsed and planned
-- again in every transaction that calls it; PL/pgSQL keeps its plan for the session.
CREATE OR REPLACE FUNCTION outbox._event_id_of(p_q outbox.queues)
RETURNS text
LANGUAGE plpgsql
IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
  RETURN pg_catalog.format('COALESCE(t.event_id, pg_catalog.md5(%L || t.id::text)::uuid)', p_q.queue || '/');
END;
$$;
