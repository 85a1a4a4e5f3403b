-- Back to the pre-token ladder: the fenced functions go, the column goes, the old bodies return.
DROP FUNCTION alr.release_step(uuid, uuid);
DROP FUNCTION alr._escalation_known(text, uuid, uuid);
DROP FUNCTION alr.apply_escalation(uuid, uuid);
DROP FUNCTION alr.take_due_steps(integer, interval);
ALTER TABLE alr.alert_escalations DROP COLUMN lease_token;
COMMENT ON COLUMN alr.alert_escalations.leased_until IS
  'Until when the step is taken into work: while the lease lasts no other instance sees the step.';

-- Leases up to batch_size due steps (next_at passed, ladder running, lease free or expired) for
-- `lease`, in next_at order, FOR UPDATE SKIP LOCKED so concurrent instances split the work.
-- The lease only hides a step for a while; apply_escalation records the decision.
CREATE OR REPLACE FUNCTION alr.take_due_steps(batch_size integer DEFAULT 100, lease interval DEFAULT '2 minutes')
RETURNS TABLE(escalation_id uuid, alert_id uuid, step_idx integer, channel text, target text,
              leased_until timestamptz)
LANGUAGE plpgsql
VOLATILE
SET search_path = ''
AS $$
DECLARE
  fn constant text := 'take_due_steps';
BEGIN
  IF take_due_steps.batch_size IS NULL OR take_due_steps.batch_size < 1 OR take_due_steps.batch_size > 10000 THEN
    PERFORM alr._invalid(fn, pg_catalog.format('batch_size must be between 1 and 10000, got %s',
      COALESCE(take_due_steps.batch_size::text, 'NULL')));
  END IF;
  IF take_due_steps.lease IS NULL OR take_due_steps.lease <= interval '0' OR take_due_steps.lease > interval '1 day' THEN
    PERFORM alr._invalid(fn, pg_catalog.format('lease must be greater than 0 and at most 1 day, got %s',
      COALESCE(take_due_steps.lease::text, 'NULL')));
  END IF;
  RETURN QUERY
  WITH due AS (
    SELECT d.id FROM alr.alert_escalations d
    WHERE d.stopped_at IS NULL AND d.next_at <= pg_catalog.now()
      AND (d.leased_until IS NULL OR d.leased_until <= pg_catalog.now())
    ORDER BY d.next_at, d.id
    LIMIT take_due_steps.batch_size
    FOR UPDATE SKIP LOCKED
  ), taken AS (
    UPDATE alr.alert_escalations e
    SET leased_until = pg_catalog.now() + take_due_steps.lease
    FROM due WHERE e.id = due.id
    RETURNING e.id, e.alert_id, e.policy_id, e.step_idx, e.next_at, e.leased_until
  )
  SELECT t.id, t.alert_id, t.step_idx, s.channel, s.target, t.leased_until
  FROM taken t
  JOIN alr.escalation_steps s ON s.policy_id = t.policy_id AND s.step_idx = t.step_idx
  ORDER BY t.next_at, t.id;
END;
$$;

-- Records that the step is being delivered: advances step_idx and sets next_at from the next
-- step's delay, or stops the ladder after its last step; clears the lease. Only while the ladder
-- runs (stopped_at IS NULL) and its alert is still firing; otherwise returns false and changes
-- nothing. The caller delivers only after true.
CREATE OR REPLACE FUNCTION alr.apply_escalation(escalation_id uuid)
RETURNS boolean
LANGUAGE plpgsql
VOLATILE
SET search_path = ''
AS $$
DECLARE
  fn constant text := 'apply_escalation';
  v_step_idx integer;
  v_policy_id uuid;
  v_next_delay interval;
  v_last boolean;
BEGIN
  IF apply_escalation.escalation_id IS NULL THEN
    PERFORM alr._invalid(fn, 'escalation_id must not be NULL, got NULL');
  END IF;
  SELECT e.step_idx, e.policy_id INTO v_step_idx, v_policy_id
  FROM alr.alert_escalations e WHERE e.id = apply_escalation.escalation_id;
  IF NOT FOUND THEN
    PERFORM alr._not_found(fn, 'escalation_id', 'escalation', apply_escalation.escalation_id);
  END IF;
  SELECT s.delay INTO v_next_delay FROM alr.escalation_steps s
  WHERE s.policy_id = v_policy_id AND s.step_idx = v_step_idx + 1;
  v_last := NOT FOUND;
  -- step_idx = v_step_idx: if another transaction advanced the step meanwhile, the re-checked
  -- row no longer matches and nothing is written.
  UPDATE alr.alert_escalations e
  SET step_idx = v_step_idx + 1,
      next_at = CASE WHEN v_last THEN NULL ELSE pg_catalog.now() + v_next_delay END,
      stopped_at = CASE WHEN v_last THEN pg_catalog.now() END,
      stop_reason = CASE WHEN v_last THEN 'completed' END,
      leased_until = NULL
  FROM alr.alerts a
  WHERE e.id = apply_escalation.escalation_id
    AND e.step_idx = v_step_idx
    AND e.stopped_at IS NULL
    AND a.id = e.alert_id AND a.state = 'firing';
  RETURN FOUND;
END;
$$;

-- Resolves a firing alert and stops all its running ladders (next_at, lease and token cleared), in
-- one transaction, so a late apply_escalation for any of their steps finds stopped_at set and
-- records nothing. Idempotent: resolving a resolved alert changes nothing.
CREATE OR REPLACE FUNCTION alr.resolve_alert(alert_id uuid)
RETURNS void
LANGUAGE plpgsql
VOLATILE
SET search_path = ''
AS $$
DECLARE
  fn constant text := 'resolve_alert';
BEGIN
  IF resolve_alert.alert_id IS NULL THEN
    PERFORM alr._invalid(fn, 'alert_id must not be NULL, got NULL');
  END IF;
  -- Lock order alert, then ladders: the same as start_escalation's.
  PERFORM 1 FROM alr.alerts a WHERE a.id = resolve_alert.alert_id FOR UPDATE;
  IF NOT FOUND THEN
    PERFORM alr._not_found(fn, 'alert_id', 'alert', resolve_alert.alert_id);
  END IF;
  UPDATE alr.alerts a SET state = 'resolved', resolved_at = pg_catalog.now()
  WHERE a.id = resolve_alert.alert_id AND a.state = 'firing';
  UPDATE alr.alert_escalations e
  SET stopped_at = pg_catalog.now(), stop_reason = 'resolved', next_at = NULL, leased_until = NULL
  WHERE e.alert_id = resolve_alert.alert_id AND e.stopped_at IS NULL;
END;
$$;
