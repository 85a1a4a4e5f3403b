-- Acknowledges a firing alert: someone on call is on it. Records who (the login role, session_user)
-- and when, with an optional note (a shared login such as the console names the person there), and
-- stops the alert's running ladders (stop_reason acknowledged; next_at, lease and token cleared) in
-- the same transaction, so no further step is delivered: a step an engine already took is refused by
-- apply_escalation, which records only on a running ladder. The alert stays firing until
-- resolve_alert; start_escalation refuses it meanwhile. Returns true when this call acknowledged it,
-- false (changing nothing) when it was already acknowledged (the first acknowledgement is kept) or
-- is resolved. Its ladders' steps left unjournaled leave alr.unjournaled_steps (see resolve_alert).
-- Locks the alert, then its ladders: resolve_alert's and start_escalation's order.
CREATE OR REPLACE FUNCTION alr.acknowledge_alert(alert_id uuid, note text DEFAULT NULL)
RETURNS boolean
LANGUAGE plpgsql
VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  fn constant text := 'acknowledge_alert';
  v_state text;
BEGIN
  IF acknowledge_alert.alert_id IS NULL THEN
    PERFORM alr._invalid(fn, 'alert_id must not be NULL, got NULL');
  END IF;
  IF acknowledge_alert.note IS NOT NULL
     AND (alr._is_blank(acknowledge_alert.note) OR pg_catalog.length(acknowledge_alert.note) > 1000) THEN
    PERFORM alr._invalid(fn, pg_catalog.format(
      'note must be NULL or a non-blank text of at most 1000 characters, got %s',
      CASE WHEN pg_catalog.length(acknowledge_alert.note) > 1000
           THEN pg_catalog.length(acknowledge_alert.note)::text || ' characters'
           ELSE pg_catalog.quote_literal(acknowledge_alert.note) END));
  END IF;
  SELECT a.state INTO v_state FROM alr.alerts a WHERE a.id = acknowledge_alert.alert_id FOR UPDATE;
  IF NOT FOUND THEN
    PERFORM alr._not_found(fn, 'alert_id', 'alert', acknowledge_alert.alert_id);
  END IF;
  IF v_state <> 'firing' THEN
    RETURN false;
  END IF;
  INSERT INTO alr.alert_acknowledgements AS k (alert_id, note)
  VALUES (acknowledge_alert.alert_id, acknowledge_alert.note)
  ON CONFLICT ON CONSTRAINT alert_acknowledgements_pkey DO NOTHING;
  IF NOT FOUND THEN
    RETURN false;
  END IF;
  UPDATE alr.alert_escalations e
  SET stopped_at = pg_catalog.now(), stop_reason = 'acknowledged', next_at = NULL, leased_until = NULL,
      lease_token = NULL
  WHERE e.alert_id = acknowledge_alert.alert_id AND e.stopped_at IS NULL;
  UPDATE alr.alert_escalations e SET unjournaled_since = NULL
  WHERE e.alert_id = acknowledge_alert.alert_id AND e.unjournaled_since IS NOT NULL;
  RETURN true;
END;
$$;
