-- claim_batch for partitions with several rows pending: with each partition's head, the rows that
-- follow it in its partition, up to run_length per partition and batch_size in all, each with its
-- own lease_token, in id order (outbox._claim_batch). Apply a partition's rows in that order and
-- stop at its first failure, giving the rest back (outbox.release) untouched; recording a
-- partition's rows in one apply_results moves its head once. run_length 1 is claim_batch.
-- Unpartitioned queues: claim_batch.
-- PL/pgSQL, not SQL: a SQL function with a SET clause is never inlined, and is parsed and planned
-- again in every transaction that calls it; PL/pgSQL keeps its plan for the session.
CREATE OR REPLACE FUNCTION outbox.claim_runs(queue text, batch_size integer DEFAULT 32, lease interval DEFAULT '30 seconds',
                                             run_length integer DEFAULT 8)
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
  RETURN QUERY SELECT * FROM outbox._claim_batch('claim_runs', queue, batch_size, lease, run_length);
END;
$$;
