-- claim_locked for partitions with several rows pending: with each partition's head, the rows that
-- follow it, up to run_length per partition and batch_size in all, locked by the caller's open
-- transaction, in id order (outbox._claim_locked). Settle what was applied: a partition's rows up
-- to its first failure (the rest stay untouched). run_length 1 is claim_locked.
-- PL/pgSQL, not SQL: a SQL function with a SET clause is never inlined, and is parsed and planned
-- again in every transaction that calls it; PL/pgSQL keeps its plan for the session.
CREATE OR REPLACE FUNCTION outbox.claim_locked_runs(queue text, batch_size integer DEFAULT 32, run_length integer DEFAULT 8)
RETURNS TABLE(id bigint, event_type text, payload jsonb, partition_key text, attempt_count integer,
              created_at timestamptz, event_id uuid, headers jsonb)
LANGUAGE plpgsql
VOLATILE
SET search_path = pg_catalog, pg_temp
-- Row level security that applies to the owner fails the call (42501) instead of hiding rows
-- from it: hidden rows were never delivered and counted nowhere (docs/security.md).
SET row_security = off
AS $$
BEGIN
  RETURN QUERY SELECT * FROM outbox._claim_locked('claim_locked_runs', queue, batch_size, run_length);
END;
$$;
