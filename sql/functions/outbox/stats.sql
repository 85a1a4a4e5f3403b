-- One row of gauges for metrics. Exact counts from one pass over the pending rows through the
-- (attempt_count, id) partial index: cost follows the pending backlog, never the sent history.
-- pending = unsent and not poisoned; ready = pending, due and not leased; leased = lease live (a
-- lease ending more than a day ahead, written by a clock since set back, is over: outbox._claim);
-- backing_off = pending with next_attempt_at in the future; poisoned = attempt_count >= max.
-- The oldest pending row is the oldest with a finite created_at: a producer may write 'infinity'
-- or '-infinity', which made the subtraction fail (22008) for every caller of stats.
CREATE OR REPLACE FUNCTION outbox.stats(queue text)
RETURNS TABLE(pending bigint, ready bigint, leased bigint, backing_off bigint, poisoned bigint,
              oldest_pending_at timestamptz, oldest_pending_age interval)
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
  v_q outbox.queues := outbox._queue('stats', queue);
BEGIN
  RETURN QUERY EXECUTE pg_catalog.format(
    'SELECT pg_catalog.count(*) FILTER (WHERE t.attempt_count < $1),
            pg_catalog.count(*) FILTER (WHERE t.attempt_count < $1
                               AND (t.next_attempt_at IS NULL OR t.next_attempt_at <= pg_catalog.now())
                               AND (t.leased_until IS NULL OR t.leased_until <= pg_catalog.now()
                                    OR t.leased_until > pg_catalog.now() + interval ''1 day'')),
            pg_catalog.count(*) FILTER (WHERE t.attempt_count < $1 AND t.leased_until > pg_catalog.now()
                                        AND t.leased_until <= pg_catalog.now() + interval ''1 day''),
            pg_catalog.count(*) FILTER (WHERE t.attempt_count < $1 AND t.next_attempt_at > pg_catalog.now()),
            pg_catalog.count(*) FILTER (WHERE t.attempt_count >= $1),
            pg_catalog.min(t.created_at) FILTER (WHERE t.attempt_count < $1 AND pg_catalog.isfinite(t.created_at)),
            pg_catalog.now() - pg_catalog.min(t.created_at) FILTER (WHERE t.attempt_count < $1 AND pg_catalog.isfinite(t.created_at))
     FROM %s t WHERE t.sent_at IS NULL AND t.attempt_count >= 0', v_q.table_oid::regclass)
    USING v_q.max_attempts;
END;
$$;
