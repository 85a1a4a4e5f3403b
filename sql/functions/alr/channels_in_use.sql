-- Every channel some policy's steps use, with how many policies use it and how many running ladders
-- still have a step on it (the current step or a later one). An engine compares it with its
-- notifiers at start: a channel nobody serves is a configuration error that would otherwise show
-- only when its first step comes due. Read-only; one walk over the (small) policy tables.
CREATE OR REPLACE FUNCTION alr.channels_in_use()
RETURNS TABLE(channel text, policies bigint, running_ladders bigint)
LANGUAGE sql
STABLE
SET search_path = pg_catalog, pg_temp
AS $$
  SELECT s.channel, pg_catalog.count(DISTINCT s.policy_id), pg_catalog.count(DISTINCT e.id)
  FROM alr.escalation_steps s
  LEFT JOIN alr.alert_escalations e
    ON e.policy_id = s.policy_id AND e.stopped_at IS NULL AND s.step_idx >= e.step_idx
  GROUP BY s.channel
  ORDER BY s.channel;
$$;
