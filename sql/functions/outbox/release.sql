-- Gives a leased row back untouched: lease and token cleared, no attempt counted, claimable at
-- once. false (and nothing changed) when the lease is no longer ours.
CREATE OR REPLACE FUNCTION outbox.release(queue text, id bigint, lease_token uuid)
RETURNS boolean
LANGUAGE plpgsql
VOLATILE
SET search_path = ''
AS $$
DECLARE
  fn constant text := 'release';
  v_q outbox.queues := outbox._queue(fn, queue);
  v_found boolean;
  v_key text;
BEGIN
  IF release.id IS NULL THEN
    PERFORM outbox._invalid(fn, 'id must not be NULL');
  END IF;
  IF release.lease_token IS NULL THEN
    PERFORM outbox._invalid(fn, 'lease_token must not be NULL');
  END IF;
  EXECUTE pg_catalog.format(
    'UPDATE %s t SET leased_until = NULL, lease_token = NULL
     WHERE t.id = $1 AND t.lease_token = $2 AND t.sent_at IS NULL
     RETURNING true, %s',
    v_q.table_oid::regclass,
    CASE WHEN v_q.partition_column IS NULL THEN 'NULL::text'
         ELSE pg_catalog.format('t.%I::text', v_q.partition_column) END)
    INTO v_found, v_key USING release.id, release.lease_token;
  IF v_key IS NOT NULL THEN
    PERFORM outbox._refresh_heads(v_q, ARRAY[v_key]);
  END IF;
  IF v_found THEN
    -- The row is claimable now: wake an idle drainer rather than leave it to the next poll.
    PERFORM pg_catalog.pg_notify(v_q.channel, v_q.queue);
  END IF;
  RETURN COALESCE(v_found, false);
END;
$$;
