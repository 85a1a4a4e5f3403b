-- A matching apply_escalation records the step: step_idx advances, next_at = the record's clock +
-- the next step's delay, lease and token cleared. After the last step the ladder ends (next_at NULL,
-- stopped_at set, stop_reason completed) and is never taken again.
BEGIN;
SELECT plan(7);
\ir ../_fixtures.sql

CREATE TEMP TABLE fx AS SELECT pg_temp.ladder(2) AS id;
CREATE TEMP TABLE t1 AS SELECT * FROM alr.take_due_steps();
SELECT is(alr.apply_escalation((SELECT escalation_id FROM t1), (SELECT lease_token FROM t1)), true,
          'apply with the matching token returns true');
SELECT is((SELECT to_jsonb(r) FROM (SELECT step_idx,
                                           next_at BETWEEN now() + interval '5 minutes'
                                                       AND clock_timestamp() + interval '5 minutes' AS due_after_delay,
                                           stopped_at, stop_reason, leased_until, lease_token
                                  FROM alr.alert_escalations WHERE id = (SELECT id FROM fx)) r),
          jsonb_build_object('step_idx', 1, 'due_after_delay', true, 'stopped_at', NULL,
                             'stop_reason', NULL, 'leased_until', NULL, 'lease_token', NULL),
          'step 0 recorded: step 1 is due after its 5 minute delay, lease and token cleared');
SELECT is_empty('SELECT * FROM alr.take_due_steps()', 'the next step is not due before its delay');

UPDATE alr.alert_escalations SET next_at = now() WHERE id = (SELECT id FROM fx);
CREATE TEMP TABLE t2 AS SELECT * FROM alr.take_due_steps();
SELECT results_eq('SELECT step_idx, channel, target FROM t2', $$VALUES (1, 'sms', '+380500000001')$$,
                  'once due, step 1 is taken with its own channel and target');
SELECT is(alr.apply_escalation((SELECT escalation_id FROM t2), (SELECT lease_token FROM t2)), true,
          'the last step is recorded');
SELECT is((SELECT to_jsonb(r) FROM (SELECT step_idx, next_at, stopped_at, stop_reason, leased_until, lease_token
                                  FROM alr.alert_escalations WHERE id = (SELECT id FROM fx)) r),
          jsonb_build_object('step_idx', 2, 'next_at', NULL, 'stopped_at', now(), 'stop_reason', 'completed',
                             'leased_until', NULL, 'lease_token', NULL),
          'after the last step the ladder ends: next_at NULL, stopped_at set, completed');
SELECT is_empty('SELECT * FROM alr.take_due_steps()', 'an ended ladder is never taken again');

SELECT * FROM finish();
ROLLBACK;
