-- Gives a taken step back untouched (lease and token cleared, step_idx and next_at kept), so the
-- next take gets it at once instead of after the lease — used by an engine that stops before
-- applying. false (and nothing changed) when the lease is no longer ours.
CREATE OR REPLACE FUNCTION alr.release_step(escalation_id uuid, lease_token uuid)
RETURNS boolean
LANGUAGE plpgsql
VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
  PERFORM alr._escalation_known('release_step', release_step.escalation_id, release_step.lease_token);
  UPDATE alr.alert_escalations e
  SET leased_until = NULL, lease_token = NULL
  WHERE e.id = release_step.escalation_id AND e.lease_token = release_step.lease_token;
  RETURN FOUND;
END;
$$;
