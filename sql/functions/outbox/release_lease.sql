-- Operator: ends the lease of a stuck row now (a worker that hangs without dying holds it until
-- leased_until): lease and token cleared together, no attempt counted, claimable at once. The
-- holder's late result is then refused by the token, like any result after a lease ran out.
-- false (nothing changed) when the row is not leased (or is sent).
-- leased_until, when given, fences the call to the lease the operator saw: it ends only a lease
-- that ends exactly then. Without it, a lease that ran out and was taken by a healthy worker
-- between the page and the click was ended instead, and the row delivered twice at once (the
-- console passes the lease end its page showed, alr 00046).
CREATE OR REPLACE FUNCTION outbox.release_lease(queue text, id bigint, leased_until timestamptz DEFAULT NULL)
RETURNS boolean
LANGUAGE plpgsql
VOLATILE
SET search_path = pg_catalog, pg_temp
-- Row level security that applies to the owner fails the call (42501) instead of hiding rows
-- from it: hidden rows were never delivered and counted nowhere (docs/security.md).
SET row_security = off
AS $$
DECLARE
  fn constant text := 'release_lease';
  v_q outbox.queues := outbox._queue(fn, queue);
  v_token uuid;
BEGIN
  IF release_lease.id IS NULL THEN
    PERFORM outbox._invalid(fn, 'id must not be NULL');
  END IF;
  IF release_lease.leased_until IN ('infinity', '-infinity') THEN
    PERFORM outbox._invalid(fn, 'leased_until must be a finite time (NULL: whatever lease the row has)');
  END IF;
  IF release_lease.leased_until IS NOT NULL THEN
    -- The token of that lease: _release_row then ends it only if it is still the row's.
    EXECUTE pg_catalog.format(
      'SELECT t.lease_token FROM %s t WHERE t.id = $1 AND t.leased_until = $2 AND t.sent_at IS NULL',
      v_q.table_oid::regclass)
      INTO v_token USING release_lease.id, release_lease.leased_until;
    IF v_token IS NULL THEN
      RETURN false;
    END IF;
  END IF;
  RETURN outbox._release_row(v_q, release_lease.id, v_token);
END;
$$;
