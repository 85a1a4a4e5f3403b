-- Heartbeat: moves leased_until to clock_timestamp() + lease while lease_token still matches and
-- returns it; NULL (and nothing changed) when the lease is no longer ours. The clock, not now():
-- counted from the start of an older transaction the new lease could already be over.
CREATE OR REPLACE FUNCTION outbox.extend_lease(queue text, id bigint, lease_token uuid, lease interval)
RETURNS timestamptz
LANGUAGE plpgsql
VOLATILE
SET search_path = pg_catalog, pg_temp
-- Row level security that applies to the owner fails the call (42501) instead of hiding rows
-- from it: hidden rows were never delivered and counted nowhere (docs/security.md).
SET row_security = off
AS $$
DECLARE
  fn constant text := 'extend_lease';
  v_q outbox.queues := outbox._queue(fn, queue);
  v_until timestamptz;
  v_key text;
BEGIN
  IF extend_lease.id IS NULL THEN
    PERFORM outbox._invalid(fn, 'id must not be NULL');
  END IF;
  IF extend_lease.lease_token IS NULL THEN
    PERFORM outbox._invalid(fn, 'lease_token must not be NULL');
  END IF;
  PERFORM outbox._check_lease(fn, lease);
  EXECUTE pg_catalog.format(
    'UPDATE %s t SET leased_until = pg_catalog.clock_timestamp() + $3
     WHERE t.id = $1 AND t.lease_token = $2 AND t.sent_at IS NULL
     RETURNING t.leased_until, %s',
    v_q.table_oid::regclass,
    CASE WHEN v_q.partition_column IS NULL THEN 'NULL::text'
         ELSE pg_catalog.format('t.%I::text', v_q.partition_column) END)
    INTO v_until, v_key USING extend_lease.id, extend_lease.lease_token, lease;
  IF v_key IS NOT NULL THEN
    UPDATE outbox.partition_heads h SET parked_until = v_until
    WHERE h.queue_id = v_q.queue_id AND h.partition_key = v_key AND h.head_id = extend_lease.id
      -- Claims no longer park the heads of leased rows (00005); one parked before still follows.
      AND h.parked_until IS NOT NULL;
  END IF;
  RETURN v_until;
END;
$$;
