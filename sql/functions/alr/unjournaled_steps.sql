-- The steps that apply_escalation recorded and that no record_delivery has journaled since, on
-- ladders whose oldest such step was recorded more than older_than ago: pages probably never sent.
-- An engine records a step, then delivers it, then journals the outcome (seed 000: record, then
-- deliver; at most once), all within its lease, its delivery timeout and its journal retries; one
-- killed in between (SIGKILL, out of memory, a lost host) leaves the step recorded and undelivered,
-- and its ladder goes on to the next step. unjournaled_since is the ladder's oldest such step's
-- record time (one per ladder); channel and target are NULL when the policy's step is gone.
-- Only steps of alerts that still fire and that nobody acknowledged are listed: those are the pages
-- that still matter (what on call is told to do about one: page its target by hand, then
-- acknowledge or resolve the alert). resolve_alert and acknowledge_alert take their ladders off the
-- partial index this reads (unjournaled_since cleared), so its cost grows with the ladders of alerts
-- that still need someone, not with every step ever left unjournaled; the filter here covers alerts
-- an owner resolved by hand.
CREATE OR REPLACE FUNCTION alr.unjournaled_steps(older_than interval DEFAULT '10 minutes')
RETURNS TABLE(escalation_id uuid, alert_id uuid, step_idx integer, channel text, target text,
              unjournaled_since timestamptz)
LANGUAGE plpgsql
STABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  fn constant text := 'unjournaled_steps';
BEGIN
  PERFORM alr._check_span(fn, 'older_than', unjournaled_steps.older_than);
  IF unjournaled_steps.older_than IS NULL OR unjournaled_steps.older_than < interval '0'
     OR unjournaled_steps.older_than > interval '366 days' THEN
    PERFORM alr._invalid(fn, pg_catalog.format('older_than must be between 0 and 366 days, got %s',
      COALESCE(unjournaled_steps.older_than::text, 'NULL')));
  END IF;
  RETURN QUERY
  SELECT e.id, e.alert_id, (u.i - 1)::integer, s.channel, s.target, e.unjournaled_since
  FROM alr.alert_escalations e
  JOIN alr.alerts a ON a.id = e.alert_id
  CROSS JOIN LATERAL pg_catalog.unnest(e.applied_tokens) WITH ORDINALITY AS u(token, i)
  LEFT JOIN alr.escalation_steps s ON s.policy_id = e.policy_id AND s.step_idx = u.i - 1
  WHERE e.unjournaled_since IS NOT NULL
    AND e.unjournaled_since <= pg_catalog.now() - unjournaled_steps.older_than
    AND u.token IS NOT NULL
    AND a.state = 'firing'
    AND NOT EXISTS (SELECT 1 FROM alr.alert_acknowledgements k WHERE k.alert_id = e.alert_id)
  ORDER BY e.unjournaled_since, e.id, u.i;
END;
$$;
