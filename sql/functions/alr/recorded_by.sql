-- The step index that lease_token recorded (the token apply_escalation kept in applied_tokens), or
-- NULL: none, or the alert is no longer firing, or someone stopped the ladder (acknowledged,
-- resolved). An engine whose apply_escalation committed but whose answer was lost (a connection
-- that died after the commit, a synchronous standby that held the commit past the engine's
-- timeout) retries it, is refused (the token was cleared), and asks this: the step its token
-- recorded is its own to deliver, once, instead of recorded and never delivered. Tokens are fresh
-- per take, so only the engine that took the step holds that token. Read-only.
CREATE OR REPLACE FUNCTION alr.recorded_by(escalation_id uuid, lease_token uuid)
RETURNS integer
LANGUAGE plpgsql
STABLE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
  PERFORM alr._escalation_known('recorded_by', recorded_by.escalation_id, recorded_by.lease_token);
  RETURN (
    SELECT pg_catalog.array_position(e.applied_tokens, recorded_by.lease_token) - 1
    FROM alr.alert_escalations e JOIN alr.alerts a ON a.id = e.alert_id
    WHERE e.id = recorded_by.escalation_id
      AND (e.stopped_at IS NULL OR e.stop_reason = 'completed')
      AND a.state = 'firing');
END;
$$;
