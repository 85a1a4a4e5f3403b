-- create_policy stores the steps in array order (step_idx 0, 1, ...) with their delay, channel and
-- target, and returns the policy id.
BEGIN;
SELECT plan(2);
\ir ../_fixtures.sql

CREATE TEMP TABLE p AS SELECT alr.create_policy('db on-call', $$[
  {"delay": "0s", "channel": "telegram", "target": "@oncall"},
  {"delay": "5 minutes", "channel": "sms", "target": "+380500000000"},
  {"delay": "PT15M", "channel": "webhook", "target": "https://pager.example/hook"}]$$) AS id;
SELECT is((SELECT name FROM alr.escalation_policies WHERE id = (SELECT id FROM p)), 'db on-call',
          'the policy is stored under the returned id');
SELECT results_eq(format('SELECT step_idx, delay, channel, target FROM alr.escalation_steps WHERE policy_id = %L ORDER BY step_idx',
                         (SELECT id FROM p)),
                  $$VALUES (0, interval '0s', 'telegram', '@oncall'), (1, interval '5 minutes', 'sms', '+380500000000'),
                           (2, interval '15 minutes', 'webhook', 'https://pager.example/hook')$$,
                  'the steps are stored in array order with their delay, channel and target');

SELECT * FROM finish();
ROLLBACK;
