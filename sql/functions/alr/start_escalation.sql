-- Starts the policy's ladder for a firing alert: step 0 becomes due after its delay. Idempotent:
-- while a ladder of this alert and policy is running, returns that ladder's id (a unique partial
-- index settles concurrent starts; a ladder that completes meanwhile is not returned, a new one is
-- started). An acknowledged alert is refused like a resolved one: someone is on it, and a new
-- ladder would page again. Step 0's delay counts from the clock, not from now() (the transaction's
-- start): a producer raising an alert in a transaction open for a while (a driver that opens them
-- implicitly, a long batch) would otherwise have step 0 page at once instead of after its delay.
CREATE OR REPLACE FUNCTION alr.start_escalation(alert_id uuid, policy_id uuid)
RETURNS uuid
LANGUAGE plpgsql
VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
  fn constant text := 'start_escalation';
  v_state text;
  v_delay interval;
  v_id uuid;
BEGIN
  IF start_escalation.alert_id IS NULL THEN
    PERFORM alr._invalid(fn, 'alert_id must not be NULL, got NULL');
  END IF;
  IF start_escalation.policy_id IS NULL THEN
    PERFORM alr._invalid(fn, 'policy_id must not be NULL, got NULL');
  END IF;
  SELECT a.state INTO v_state FROM alr.alerts a WHERE a.id = start_escalation.alert_id FOR KEY SHARE;
  IF NOT FOUND THEN
    PERFORM alr._not_found(fn, 'alert_id', 'alert', start_escalation.alert_id);
  END IF;
  IF v_state <> 'firing' THEN
    PERFORM alr._invalid(fn, pg_catalog.format('alert_id must name a firing alert, got %s (%s)',
      start_escalation.alert_id, v_state));
  END IF;
  IF EXISTS (SELECT 1 FROM alr.alert_acknowledgements k WHERE k.alert_id = start_escalation.alert_id) THEN
    PERFORM alr._invalid(fn, pg_catalog.format('alert_id must name an alert nobody acknowledged, got %s (acknowledged)',
      start_escalation.alert_id));
  END IF;
  SELECT s.delay INTO v_delay FROM alr.escalation_steps s
  WHERE s.policy_id = start_escalation.policy_id AND s.step_idx = 0;
  IF NOT FOUND THEN
    PERFORM alr._not_found(fn, 'policy_id', 'policy', start_escalation.policy_id);
  END IF;

  -- Insert, or read the running ladder the insert conflicted with. Each statement has its own
  -- snapshot: that ladder may stop between the two (apply_escalation recording its last step; the
  -- alert's lock keeps resolve_alert and acknowledge_alert out), and then there is none to return
  -- and a new one may be started: try again. Each round needs another ladder to stop meanwhile.
  LOOP
    INSERT INTO alr.alert_escalations AS e (id, alert_id, policy_id, step_idx, next_at)
    VALUES (core.new_id(), start_escalation.alert_id, start_escalation.policy_id, 0, pg_catalog.clock_timestamp() + v_delay)
    ON CONFLICT (alert_id, policy_id) WHERE stopped_at IS NULL DO NOTHING
    RETURNING e.id INTO v_id;
    EXIT WHEN v_id IS NOT NULL;
    SELECT e.id INTO v_id FROM alr.alert_escalations e
    WHERE e.alert_id = start_escalation.alert_id AND e.policy_id = start_escalation.policy_id
      AND e.stopped_at IS NULL;
    EXIT WHEN v_id IS NOT NULL;
  END LOOP;
  RETURN v_id;
END;
$$;
