-- Gives a leased row back untouched, the common core of release (p_token: only while the lease is
-- the caller's) and release_lease (p_token NULL: an operator ends whatever lease the row has):
-- lease and token cleared together, no attempt counted, the partition's head refreshed and an idle
-- drainer woken. false (nothing changed) when the row was not leased (or not with p_token).
CREATE OR REPLACE FUNCTION outbox._release_row(p_q outbox.queues, p_id bigint, p_token uuid)
RETURNS boolean
LANGUAGE plpgsql
VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  v_found boolean;
  v_key text;
BEGIN
  EXECUTE pg_catalog.format(
    'UPDATE %s t SET leased_until = NULL, lease_token = NULL
     WHERE t.id = $1 AND t.lease_token = COALESCE($2, t.lease_token) AND t.sent_at IS NULL
     RETURNING true, %s',
    p_q.table_oid::regclass,
    CASE WHEN p_q.partition_column IS NULL THEN 'NULL::text'
         ELSE pg_catalog.format('t.%I::text', p_q.partition_column) END)
    INTO v_found, v_key USING p_id, p_token;
  IF v_key IS NOT NULL THEN
    PERFORM outbox._refresh_heads(p_q, ARRAY[v_key]);
  END IF;
  IF v_found THEN
    -- The row is claimable now: wake an idle drainer rather than leave it to the next poll.
    PERFORM pg_catalog.pg_notify(p_q.channel, p_q.queue);
  END IF;
  RETURN COALESCE(v_found, false);
END;
$$;
