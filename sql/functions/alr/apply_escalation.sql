-- Records that the step is being delivered ("record, then deliver": the caller delivers only after
-- true): advances step_idx and sets next_at from the next step's delay, or stops the ladder after
-- its last step; clears lease and token, keeping the token as the step's element of applied_tokens:
-- the one token record_delivery accepts, once, for this step, and the ladder's unjournaled_since
-- when it had no step waiting for its journal. Only when lease_token still matches
-- AND the ladder runs AND its alert is still firing; otherwise returns false and changes nothing at
-- all — not next_at, not step_idx, not leased_until (a late instance must not break the current
-- holder's lease). The next step's delay counts from the clock, not from now() (the transaction's
-- start), as take_due_steps' due times do: a client whose driver opens transactions implicitly
-- (psycopg2, JDBC without autocommit) would otherwise record in a transaction begun long before,
-- and the next step, due its delay after that start, would page at once instead of after its delay.
CREATE OR REPLACE FUNCTION alr.apply_escalation(escalation_id uuid, lease_token uuid)
RETURNS boolean
LANGUAGE plpgsql
VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  fn constant text := 'apply_escalation';
  v_step_idx integer;
  v_policy_id uuid;
  v_next_delay interval;
  v_last boolean;
BEGIN
  PERFORM alr._escalation_known(fn, apply_escalation.escalation_id, apply_escalation.lease_token);
  SELECT e.step_idx, e.policy_id INTO v_step_idx, v_policy_id
  FROM alr.alert_escalations e WHERE e.id = apply_escalation.escalation_id;
  SELECT s.delay INTO v_next_delay FROM alr.escalation_steps s
  WHERE s.policy_id = v_policy_id AND s.step_idx = v_step_idx + 1;
  v_last := NOT FOUND;
  -- The token decides ownership; step_idx = v_step_idx makes the computed next step consistent
  -- with the row that is written (both are re-checked on the locked row version).
  UPDATE alr.alert_escalations e
  SET step_idx = v_step_idx + 1,
      next_at = CASE WHEN v_last THEN NULL ELSE pg_catalog.clock_timestamp() + v_next_delay END,
      stopped_at = CASE WHEN v_last THEN pg_catalog.now() END,
      stop_reason = CASE WHEN v_last THEN 'completed' END,
      leased_until = NULL,
      lease_token = NULL,
      applied_tokens[v_step_idx + 1] = apply_escalation.lease_token,
      unjournaled_since = COALESCE(e.unjournaled_since, pg_catalog.now())
  FROM alr.alerts a
  WHERE e.id = apply_escalation.escalation_id
    AND e.lease_token = apply_escalation.lease_token
    AND e.step_idx = v_step_idx
    AND e.stopped_at IS NULL
    AND a.id = e.alert_id AND a.state = 'firing';
  RETURN FOUND;
END;
$$;
