-- Lease mode: leases up to batch_size deliverable rows for `lease`, each with its own fresh
-- lease_token, in one short transaction (outbox._claim_batch). One row per partition: the seed's
-- claim; claim_runs takes a partition's next rows together.
-- PL/pgSQL, not SQL: a SQL function with a SET clause is never inlined, and is parsed and planned
-- again in every transaction that calls it; PL/pgSQL keeps its plan for the session.
CREATE OR REPLACE FUNCTION outbox.claim_batch(queue text, batch_size integer DEFAULT 32, lease interval DEFAULT '30 seconds')
RETURNS TABLE(id bigint, event_type text, payload jsonb, partition_key text, attempt_count integer,
              lease_token uuid, leased_until timestamptz, created_at timestamptz, event_id uuid, headers jsonb)
LANGUAGE plpgsql
VOLATILE
SET search_path = pg_catalog, pg_temp
-- Row level security that applies to the owner fails the call (42501) instead of hiding rows
-- from it: hidden rows were never delivered and counted nowhere (docs/security.md).
SET row_security = off
AS $$
BEGIN
  RETURN QUERY SELECT * FROM outbox._claim_batch('claim_batch', queue, batch_size, lease, 1);
END;
$$;
