-- Fixtures shared by the alr pgTAP files, included with \ir inside each file's transaction (so all
-- of it is rolled back). Time does not pass inside one transaction (now() is fixed), so a lease
-- "expires" by moving leased_until into the past: pg_temp.expire().
SET client_min_messages = warning;
-- Isolate from ladders other sessions may have committed: take_due_steps looks at every ladder.
DELETE FROM alr.delivery_journal;
DELETE FROM alr.alert_escalations;

-- A policy of n steps: step 0 after 0s on telegram, then every 5 minutes on sms.
CREATE FUNCTION pg_temp.policy(p_steps integer DEFAULT 1) RETURNS uuid LANGUAGE sql AS $$
  SELECT alr.create_policy('test policy', (
    SELECT jsonb_agg(jsonb_build_object(
             'delay', CASE WHEN i = 0 THEN '0s' ELSE '5 minutes' END,
             'channel', CASE WHEN i = 0 THEN 'telegram' ELSE 'sms' END,
             'target', CASE WHEN i = 0 THEN '@oncall' ELSE '+38050000000' || i END) ORDER BY i)
    FROM generate_series(0, p_steps - 1) i));
$$;
-- A running ladder of a new firing alert over a new policy of n steps; step 0 is due now.
CREATE FUNCTION pg_temp.ladder(p_steps integer DEFAULT 1) RETURNS uuid LANGUAGE sql AS $$
  SELECT alr.start_escalation(alr.add_alert('disk full'), pg_temp.policy(p_steps));
$$;
-- The whole ladder row, for "changed nothing" comparisons.
CREATE FUNCTION pg_temp.row_of(p_id uuid) RETURNS jsonb LANGUAGE sql AS $$
  SELECT to_jsonb(e) FROM alr.alert_escalations e WHERE e.id = p_id;
$$;
-- Every row of every alr table: what a failing call could have touched.
CREATE FUNCTION pg_temp.alr_state() RETURNS jsonb LANGUAGE sql AS $$
  SELECT jsonb_build_object(
    'alerts', (SELECT jsonb_agg(to_jsonb(t) ORDER BY t.id) FROM alr.alerts t),
    'policies', (SELECT jsonb_agg(to_jsonb(t) ORDER BY t.id) FROM alr.escalation_policies t),
    'steps', (SELECT jsonb_agg(to_jsonb(t) ORDER BY t.policy_id, t.step_idx) FROM alr.escalation_steps t),
    'escalations', (SELECT jsonb_agg(to_jsonb(t) ORDER BY t.id) FROM alr.alert_escalations t),
    'journal', (SELECT jsonb_agg(to_jsonb(t) ORDER BY t.id) FROM alr.delivery_journal t));
$$;
-- The lease of ladder p_id ran out (a second ago).
CREATE FUNCTION pg_temp.expire(p_id uuid) RETURNS void LANGUAGE sql AS $$
  UPDATE alr.alert_escalations SET leased_until = now() - interval '1 second' WHERE id = p_id;
$$;
CREATE TEMP TABLE state_before(state jsonb);
RESET client_min_messages;
