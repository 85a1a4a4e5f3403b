-- Resolves a firing alert and stops all its running ladders (next_at, lease and token cleared), in
-- one transaction, so a late apply_escalation for any of their steps finds stopped_at set and
-- records nothing. Its ladders' steps left unjournaled (an engine killed between recording and
-- delivering) leave alr.unjournaled_steps' partial index: they no longer matter (a resolved alert
-- pages nobody), and kept there they made its cost grow with every such step ever left. Their
-- tokens stay: a late record_delivery still journals them. Idempotent: resolving a resolved alert
-- changes nothing.
CREATE OR REPLACE FUNCTION alr.resolve_alert(alert_id uuid)
RETURNS void
LANGUAGE plpgsql
VOLATILE
SET search_path = pg_catalog, pg_temp
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
  SET stopped_at = pg_catalog.now(), stop_reason = 'resolved', next_at = NULL, leased_until = NULL,
      lease_token = NULL
  WHERE e.alert_id = resolve_alert.alert_id AND e.stopped_at IS NULL;
  UPDATE alr.alert_escalations e SET unjournaled_since = NULL
  WHERE e.alert_id = resolve_alert.alert_id AND e.unjournaled_since IS NOT NULL;
END;
$$;
