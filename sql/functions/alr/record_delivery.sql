-- Journals one delivery of a step that apply_escalation recorded, with error NULL for success,
-- fenced by the token: only the take whose apply_escalation recorded the step (lease_token =
-- the step's element of applied_tokens) journals it, and only once (the element is cleared in the
-- same statement, under the ladder's row lock, so two calls at once can not both pass, and with it
-- the ladder's unjournaled_since when no other step waits for its journal). Returns the
-- journal row's id, or NULL when refused (another token, or the step is journaled already): a
-- refused call changes nothing. channel, target and alert are read from the ladder, not trusted
-- from the caller. A blank error is refused (a failure needs its reason); the error is kept to its
-- first 4000 characters (a channel's whole error page could be megabytes).
CREATE OR REPLACE FUNCTION alr.record_delivery(escalation_id uuid, step_idx integer, lease_token uuid,
                                               error text DEFAULT NULL)
RETURNS bigint
LANGUAGE plpgsql
VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  fn constant text := 'record_delivery';
  v_e alr.alert_escalations;
  v_s alr.escalation_steps;
  v_id bigint;
BEGIN
  IF record_delivery.escalation_id IS NULL THEN
    PERFORM alr._invalid(fn, 'escalation_id must not be NULL, got NULL');
  END IF;
  IF record_delivery.lease_token IS NULL THEN
    PERFORM alr._invalid(fn, 'lease_token must not be NULL, got NULL');
  END IF;
  -- A failure journaled without a reason tells on call nothing: say why, or NULL for delivered.
  IF alr._is_blank(record_delivery.error) THEN
    PERFORM alr._invalid(fn, pg_catalog.format(
      'error must be NULL (delivered) or say why the delivery failed, got %s',
      -- Its length, not the text, when long: a megabyte of blanks is not echoed into the error.
      CASE WHEN pg_catalog.length(record_delivery.error) > 200
           THEN pg_catalog.format('a blank text of %s characters', pg_catalog.length(record_delivery.error))
           ELSE pg_catalog.quote_literal(record_delivery.error) END));
  END IF;
  SELECT * INTO v_e FROM alr.alert_escalations e WHERE e.id = record_delivery.escalation_id;
  IF NOT FOUND THEN
    PERFORM alr._not_found(fn, 'escalation_id', 'escalation', record_delivery.escalation_id);
  END IF;
  IF record_delivery.step_idx IS NULL OR record_delivery.step_idx < 0
     OR record_delivery.step_idx >= v_e.step_idx THEN
    PERFORM alr._invalid(fn, pg_catalog.format(
      'step_idx must be a step apply_escalation already recorded (%s), got %s',
      CASE WHEN v_e.step_idx = 0 THEN 'none yet' ELSE pg_catalog.format('0 to %s', v_e.step_idx - 1) END,
      COALESCE(record_delivery.step_idx::text, 'NULL')));
  END IF;
  UPDATE alr.alert_escalations e
  SET applied_tokens[record_delivery.step_idx + 1] = NULL,
      -- The oldest record time is kept while another step waits for its journal (conservative:
      -- that step was recorded no later).
      unjournaled_since = CASE WHEN EXISTS (
        SELECT 1 FROM pg_catalog.unnest(e.applied_tokens) WITH ORDINALITY AS u(token, i)
        WHERE u.token IS NOT NULL AND u.i <> record_delivery.step_idx + 1) THEN e.unjournaled_since END
  WHERE e.id = record_delivery.escalation_id
    AND e.applied_tokens[record_delivery.step_idx + 1] = record_delivery.lease_token;
  IF NOT FOUND THEN
    RETURN NULL;
  END IF;
  SELECT * INTO STRICT v_s FROM alr.escalation_steps s
  WHERE s.policy_id = v_e.policy_id AND s.step_idx = record_delivery.step_idx;
  INSERT INTO alr.delivery_journal (escalation_id, alert_id, step_idx, channel, target, lease_token,
                                    outcome, error)
  VALUES (v_e.id, v_e.alert_id, record_delivery.step_idx, v_s.channel, v_s.target,
          record_delivery.lease_token,
          CASE WHEN record_delivery.error IS NULL THEN 'delivered' ELSE 'failed' END,
          pg_catalog.left(record_delivery.error, 4000))
  RETURNING id INTO v_id;
  RETURN v_id;
END;
$$;
