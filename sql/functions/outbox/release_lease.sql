-- Operator: ends the lease of a stuck row now (a worker that hangs without dying holds it until
-- leased_until): lease and token cleared together, no attempt counted, claimable at once. The
-- holder's late result is then refused by the token, like any result after a lease ran out.
-- false (nothing changed) when the row is not leased (or is sent).
CREATE OR REPLACE FUNCTION outbox.release_lease(queue text, id bigint)
RETURNS boolean
LANGUAGE plpgsql
VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  fn constant text := 'release_lease';
  v_q outbox.queues := outbox._queue(fn, queue);
BEGIN
  IF release_lease.id IS NULL THEN
    PERFORM outbox._invalid(fn, 'id must not be NULL');
  END IF;
  RETURN outbox._release_row(v_q, release_lease.id, NULL);
END;
$$;
