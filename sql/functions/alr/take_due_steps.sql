-- Leases up to batch_size due steps (next_at passed, ladder running, lease free or expired) for
-- `lease`, in next_at order, FOR UPDATE SKIP LOCKED so concurrent instances split the work. Every
-- row gets its own fresh lease_token (core.new_id() is evaluated per row in the SET): the lease is
-- only a deadline, the token is ownership, and apply_escalation records only with a matching token.
-- A lease that ends more than a day ahead (the longest a take hands out) was written by a clock that
-- has since been set back: it counts as over, or its step waited as long as the clock had jumped.
-- Due and lease are read from the clock, not now() (the transaction's start): a client whose
-- driver opens transactions implicitly (psycopg2, JDBC without autocommit) would otherwise take in
-- a transaction begun long before, and be handed a lease already over.
CREATE OR REPLACE FUNCTION alr.take_due_steps(batch_size integer DEFAULT 100, lease interval DEFAULT '2 minutes')
RETURNS TABLE(escalation_id uuid, alert_id uuid, step_idx integer, channel text, target text,
              lease_token uuid, leased_until timestamptz)
LANGUAGE plpgsql
VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  fn constant text := 'take_due_steps';
  v_clock constant timestamptz := pg_catalog.clock_timestamp();
BEGIN
  IF take_due_steps.batch_size IS NULL OR take_due_steps.batch_size < 1 OR take_due_steps.batch_size > 10000 THEN
    PERFORM alr._invalid(fn, pg_catalog.format('batch_size must be between 1 and 10000, got %s',
      COALESCE(take_due_steps.batch_size::text, 'NULL')));
  END IF;
  PERFORM alr._check_span(fn, 'lease', take_due_steps.lease);
  IF take_due_steps.lease IS NULL OR take_due_steps.lease <= interval '0' OR take_due_steps.lease > interval '1 day' THEN
    PERFORM alr._invalid(fn, pg_catalog.format('lease must be greater than 0 and at most 1 day, got %s',
      COALESCE(take_due_steps.lease::text, 'NULL')));
  END IF;
  RETURN QUERY
  WITH due AS (
    SELECT d.id FROM alr.alert_escalations d
    WHERE d.stopped_at IS NULL AND d.next_at <= v_clock
      AND (d.leased_until IS NULL OR d.leased_until <= v_clock
           OR d.leased_until > v_clock + interval '1 day')
    ORDER BY d.next_at, d.id
    LIMIT take_due_steps.batch_size
    FOR UPDATE SKIP LOCKED
  ), taken AS (
    UPDATE alr.alert_escalations e
    SET leased_until = v_clock + take_due_steps.lease,
        lease_token = core.new_id()
    FROM due WHERE e.id = due.id
    RETURNING e.id, e.alert_id, e.policy_id, e.step_idx, e.next_at, e.lease_token, e.leased_until
  )
  SELECT t.id, t.alert_id, t.step_idx, s.channel, s.target, t.lease_token, t.leased_until
  FROM taken t
  JOIN alr.escalation_steps s ON s.policy_id = t.policy_id AND s.step_idx = t.step_idx
  ORDER BY t.next_at, t.id;
END;
$$;
