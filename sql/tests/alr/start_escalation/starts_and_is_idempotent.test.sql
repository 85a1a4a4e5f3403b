-- start_escalation starts a ladder at step 0, due after step 0's delay, free (no lease, no token);
-- starting it again while it runs returns the same ladder. Bad input: NULL ids (22023), unknown
-- alert or policy (P0002), a resolved alert (22023); rejected calls change nothing.
BEGIN;
SELECT plan(10);
\ir ../_fixtures.sql

CREATE TEMP TABLE fx AS SELECT alr.add_alert('api down') AS alert_id,
  alr.create_policy('p', '[{"delay":"3 minutes","channel":"telegram","target":"@a"}]') AS policy_id;
CREATE TEMP TABLE e AS SELECT alr.start_escalation(alert_id, policy_id) AS id FROM fx;
-- Due 3 minutes after the call (the clock when it ran: later than now(), the transaction's start).
SELECT is((SELECT to_jsonb(r) FROM (SELECT alert_id, policy_id, step_idx,
                                           next_at BETWEEN now() + interval '3 minutes'
                                                       AND clock_timestamp() + interval '3 minutes' AS due_after_delay,
                                           stopped_at, leased_until, lease_token
                                  FROM alr.alert_escalations WHERE id = (SELECT id FROM e)) r),
          (SELECT jsonb_build_object('alert_id', alert_id, 'policy_id', policy_id, 'step_idx', 0,
                                     'due_after_delay', true, 'stopped_at', NULL,
                                     'leased_until', NULL, 'lease_token', NULL) FROM fx),
          'a new ladder is at step 0, due after its delay, free');
SELECT is(alr.start_escalation(alert_id, policy_id), (SELECT id FROM e), 'starting a running ladder again returns it')
FROM fx;
SELECT is((SELECT count(*)::int FROM alr.alert_escalations), 1, 'and creates no second ladder');

INSERT INTO state_before SELECT pg_temp.alr_state();
SELECT throws_ok(format('SELECT alr.start_escalation(NULL, %L)', policy_id), '22023',
                 'start_escalation: alert_id must not be NULL, got NULL', 'a NULL alert_id is rejected') FROM fx;
SELECT throws_ok(format('SELECT alr.start_escalation(%L, NULL)', alert_id), '22023',
                 'start_escalation: policy_id must not be NULL, got NULL', 'a NULL policy_id is rejected') FROM fx;
SELECT throws_ok(format('SELECT alr.start_escalation(%L, %L)', '00000000-0000-0000-0000-000000000003', policy_id), 'P0002',
                 'start_escalation: alert_id must name an existing alert, got 00000000-0000-0000-0000-000000000003',
                 'an unknown alert is P0002') FROM fx;
SELECT throws_ok(format('SELECT alr.start_escalation(%L, %L)', alert_id, '00000000-0000-0000-0000-000000000004'), 'P0002',
                 'start_escalation: policy_id must name an existing policy, got 00000000-0000-0000-0000-000000000004',
                 'an unknown policy is P0002') FROM fx;
SELECT is(pg_temp.alr_state(), (SELECT state FROM state_before), 'the rejected starts changed nothing');

CREATE TEMP TABLE r AS SELECT alr.add_alert('resolved one') AS id;
SELECT alr.resolve_alert(id) FROM r;
DELETE FROM state_before;
INSERT INTO state_before SELECT pg_temp.alr_state();
SELECT throws_ok(format('SELECT alr.start_escalation(%L, %L)', r.id, fx.policy_id), '22023',
                 format('start_escalation: alert_id must name a firing alert, got %s (resolved)', r.id),
                 'a resolved alert does not escalate') FROM r, fx;
SELECT is(pg_temp.alr_state(), (SELECT state FROM state_before), 'and nothing changed');

SELECT * FROM finish();
ROLLBACK;
