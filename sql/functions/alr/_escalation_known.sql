-- Validates the (escalation_id, lease_token) pair of apply_escalation and release_step: both
-- non-NULL (a NULL token would mean "free", which no caller holds) and the escalation exists.
CREATE OR REPLACE FUNCTION alr._escalation_known(p_function text, p_escalation_id uuid, p_lease_token uuid)
RETURNS void
LANGUAGE plpgsql
STABLE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
  IF p_escalation_id IS NULL THEN
    PERFORM alr._invalid(p_function, 'escalation_id must not be NULL, got NULL');
  END IF;
  IF p_lease_token IS NULL THEN
    PERFORM alr._invalid(p_function, 'lease_token must not be NULL, got NULL');
  END IF;
  PERFORM 1 FROM alr.alert_escalations e WHERE e.id = p_escalation_id;
  IF NOT FOUND THEN
    PERFORM alr._not_found(p_function, 'escalation_id', 'escalation', p_escalation_id);
  END IF;
END;
$$;
