-- When a claim should next be tried on a queue although no NOTIFY arrives: the earliest end of a
-- lease or backoff that parks work (a time at or before now() means "claim now"), or NULL when
-- nothing is parked. A worker that sleeps until then (or a NOTIFY) never waits for its poll
-- fallback. Partitioned queues: the parked heads, one index probe (a head parked empty for a
-- second while a producer of its key commits is included, so that row is not left waiting).
-- Unpartitioned queues: the first 1,000 pending rows in claim order, through the claim index
-- (bounded; rows further back are found by the claim that follows).
CREATE OR REPLACE FUNCTION outbox.next_due(queue text)
RETURNS timestamptz
LANGUAGE plpgsql
STABLE
SET search_path = pg_catalog, pg_temp
-- Row level security that applies to the owner fails the call (42501) instead of hiding rows
-- from it: hidden rows were never delivered and counted nowhere (docs/security.md).
SET row_security = off
SET enable_seqscan = off
SET jit = off
AS $$
DECLARE
  v_q outbox.queues := outbox._queue('next_due', queue);
  v_at timestamptz;
BEGIN
  IF v_q.partition_column IS NOT NULL THEN
    SELECT h.parked_until INTO v_at FROM outbox.partition_heads h
    WHERE h.queue_id = v_q.queue_id AND h.parked_until IS NOT NULL
    ORDER BY h.parked_until LIMIT 1;
    -- Heads of leased rows are not parked (a claim writes only the row): their leases' ends, from
    -- the first 1,000 ready heads (when a claim found nothing, the ready heads are the ones in flight).
    RETURN LEAST(v_at, outbox._first_lease_end(v_q, 1000));
  END IF;
  EXECUTE pg_catalog.format(
    'SELECT pg_catalog.min(GREATEST(s.next_attempt_at,
                                    CASE WHEN s.leased_until <= pg_catalog.clock_timestamp() + interval ''1 day'' THEN s.leased_until END))
     FROM (SELECT t.next_attempt_at, t.leased_until FROM %s t
           WHERE t.sent_at IS NULL AND t.attempt_count < $1
           ORDER BY t.attempt_count, t.id LIMIT 1000) s', v_q.table_oid::regclass)
    INTO v_at USING v_q.max_attempts;
  RETURN v_at;
END;
$$;
