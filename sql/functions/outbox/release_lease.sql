-- Operator: ends the lease of a stuck row now (a worker that hangs without dying holds it until
-- leased_until): lease and token cleared together, no attempt counted, claimable at once. The
-- holder's late result is then refused by the token, like any result after a lease ran out.
-- false (nothing changed) when the row is not leased (or is sent).
CREATE OR REPLACE FUNCTION outbox.release_lease(queue text, id bigint)
RETURNS boolean
LANGUAGE plpgsql
VOLATILE
SET search_path = ''
AS $$
DECLARE
  fn constant text := 'release_lease';
  v_q outbox.queues := outbox._queue(fn, queue);
  v_found boolean;
  v_key text;
BEGIN
  IF release_lease.id IS NULL THEN
    PERFORM outbox._invalid(fn, 'id must not be NULL');
  END IF;
  EXECUTE pg_catalog.format(
    'UPDATE %s t SET leased_until = NULL, lease_token = NULL
     WHERE t.id = $1 AND t.lease_token IS NOT NULL AND t.sent_at IS NULL
     RETURNING true, %s',
    v_q.table_oid::regclass,
    CASE WHEN v_q.partition_column IS NULL THEN 'NULL::text'
         ELSE pg_catalog.format('t.%I::text', v_q.partition_column) END)
    INTO v_found, v_key USING release_lease.id;
  IF v_key IS NOT NULL THEN
    PERFORM outbox._refresh_heads(v_q, ARRAY[v_key]);
  END IF;
  IF v_found THEN
    PERFORM pg_catalog.pg_notify(v_q.channel, v_q.queue);
  END IF;
  RETURN COALESCE(v_found, false);
END;
$$;
