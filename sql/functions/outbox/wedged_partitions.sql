-- The max_partitions partitions whose oldest pending row is older than older_than, oldest first,
-- with their head and why it is not moving. Reads outbox.partition_heads, so its cost follows the
-- number of partitions with pending work, not the backlog. A key whose head points at a row that is
-- gone is listed with its oldest pending row.
CREATE OR REPLACE FUNCTION outbox.wedged_partitions(queue text, older_than interval, max_partitions integer DEFAULT 10)
RETURNS TABLE(partition_key text, head_id bigint, head_attempt_count integer, head_last_error text,
              oldest_pending_at timestamptz, pending bigint, reason text)
LANGUAGE plpgsql
STABLE
SET search_path = pg_catalog, pg_temp
-- Row level security that applies to the owner fails the call (42501) instead of hiding rows
-- from it: hidden rows were never delivered and counted nowhere (docs/security.md).
SET row_security = off
AS $$
DECLARE
  fn constant text := 'wedged_partitions';
  v_q outbox.queues := outbox._queue(fn, queue);
BEGIN
  IF v_q.partition_column IS NULL THEN
    PERFORM outbox._invalid(fn, pg_catalog.format('queue %s has no partition column', v_q.queue));
  END IF;
  PERFORM outbox._check_span(fn, 'older_than', older_than);
  IF older_than IS NULL OR older_than < interval '0' THEN
    PERFORM outbox._invalid(fn, pg_catalog.format(
      'older_than must be 0 or more, got %s', COALESCE(older_than::text, 'NULL')));
  END IF;
  -- Further back than the clock can subtract (22008 from now() - older_than).
  IF older_than > interval '1000 years' THEN
    PERFORM outbox._invalid(fn, pg_catalog.format('older_than must be at most 1000 years, got %s', older_than));
  END IF;
  IF max_partitions IS NULL OR max_partitions < 1 OR max_partitions > 10000 THEN
    PERFORM outbox._invalid(fn, pg_catalog.format(
      'max_partitions must be between 1 and 10000, got %s', COALESCE(max_partitions::text, 'NULL')));
  END IF;
  -- A head whose row is gone (deleted by the application, or made sent by hand) is not moved by
  -- claims until its park ends or the repair pass finds it, and its key waits meanwhile: listed
  -- with the key's oldest pending row, and says so (an inner join on the head's row left out exactly
  -- that stuck key).
  RETURN QUERY EXECUTE pg_catalog.format(
    'SELECT h.partition_key, COALESCE(t.id, f.id), COALESCE(t.attempt_count, f.attempt_count),
            CASE WHEN t.id IS NOT NULL THEN t.last_error ELSE f.last_error END, COALESCE(t.created_at, f.created_at),
            (SELECT pg_catalog.count(*) FROM %1$s p
             WHERE p.%2$I = h.partition_key::%3$s AND p.sent_at IS NULL AND p.attempt_count < $2),
            CASE
              WHEN t.id IS NULL THEN ''its head points at row '' || h.head_id
                   || '', which is gone or sent: the next claim to reach the head, or the repair pass (outbox.repair), moves it on''
              WHEN t.leased_until > pg_catalog.now() AND t.leased_until <= pg_catalog.now() + interval ''1 day''
                THEN ''leased until '' || t.leased_until
              WHEN t.next_attempt_at > pg_catalog.now() THEN ''backing off until '' || t.next_attempt_at
                   || '' after '' || t.attempt_count || '' attempts''
              ELSE ''ready, waiting for a drainer'' END
     FROM outbox.partition_heads h
     LEFT JOIN %1$s t ON t.id = h.head_id AND t.sent_at IS NULL
     LEFT JOIN LATERAL (SELECT p.id, p.attempt_count, p.last_error, p.created_at FROM %1$s p
                        WHERE t.id IS NULL AND h.head_id IS NOT NULL
                          AND p.%2$I = h.partition_key::%3$s AND p.sent_at IS NULL AND p.attempt_count < $2
                        ORDER BY p.id LIMIT 1) f ON true
     WHERE h.queue_id = $1 AND COALESCE(t.created_at, f.created_at) < pg_catalog.now() - $3
     ORDER BY COALESCE(t.created_at, f.created_at)
     LIMIT $4', v_q.table_oid::regclass, v_q.partition_column, v_q.partition_type)
    USING v_q.queue_id, v_q.max_attempts, older_than, max_partitions;
END;
$$;
