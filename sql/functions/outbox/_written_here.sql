-- True when a row version with this xmin was written by the current transaction (or one of its
-- subtransactions): the only writer in progress whose rows the caller can see. xmin is 32 bits; it
-- is widened against the current transaction's full id for pg_xact_status. Subtransaction ids are
-- newer than their top transaction, so an older xmin is someone else's without a lookup. (Callers
-- pass rows written while this transaction was open, never rows old enough to have wrapped.)
CREATE OR REPLACE FUNCTION outbox._written_here(p_xmin xid)
RETURNS boolean
LANGUAGE sql
VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
  SELECT w.full_xid >= m.top AND pg_catalog.pg_xact_status(w.full_xid::text::xid8) = 'in progress'
  FROM (SELECT pg_catalog.pg_current_xact_id()::text::bigint AS top) m
  CROSS JOIN LATERAL (
    SELECT m.top + ((p_xmin::text::bigint - (m.top % 4294967296) + 6442450944) % 4294967296 - 2147483648)
           AS full_xid) w;
$$;
