-- unjournaled_steps lists the steps apply_escalation recorded that no record_delivery journaled
-- (an engine killed between the two: a page probably never sent), on ladders whose oldest such
-- step was recorded more than older_than ago; journaling a step takes it off the list, and the
-- ladder's unjournaled_since goes back to NULL once none is left. It changes nothing, readers may
-- call it, and bad bounds are refused (22023).
BEGIN;
SELECT plan(14);
\ir ../_fixtures.sql

CREATE TEMP TABLE fx AS SELECT pg_temp.ladder(2) AS id;
CREATE TEMP TABLE t1 AS SELECT * FROM alr.take_due_steps();
SELECT alr.apply_escalation((SELECT escalation_id FROM t1), (SELECT lease_token FROM t1));
SELECT is((SELECT unjournaled_since FROM alr.alert_escalations WHERE id = (SELECT id FROM fx)), now(),
          'a recorded step sets the ladder''s unjournaled_since');
SELECT results_eq($$SELECT step_idx, channel, target FROM alr.unjournaled_steps(interval '0')$$,
  $$VALUES (0, 'telegram'::text, '@oncall'::text)$$, 'with no bound, the step just recorded is listed');
SELECT is_empty($$SELECT * FROM alr.unjournaled_steps()$$, 'by default only steps older than 10 minutes');

-- Twenty minutes later (time does not pass in a transaction: the record is moved back).
UPDATE alr.alert_escalations SET unjournaled_since = now() - interval '20 minutes' WHERE id = (SELECT id FROM fx);
INSERT INTO state_before SELECT pg_temp.alr_state();
SELECT results_eq($$SELECT escalation_id, step_idx, unjournaled_since FROM alr.unjournaled_steps()$$,
  $$SELECT (SELECT id FROM fx), 0, now() - interval '20 minutes'$$, 'an old unjournaled step is listed');
SELECT is(pg_temp.alr_state(), (SELECT state FROM state_before), 'asking changed nothing');

UPDATE alr.alert_escalations SET next_at = now() WHERE id = (SELECT id FROM fx);
CREATE TEMP TABLE t2 AS SELECT * FROM alr.take_due_steps();
SELECT alr.apply_escalation((SELECT escalation_id FROM t2), (SELECT lease_token FROM t2));
SELECT results_eq($$SELECT step_idx, channel, unjournaled_since FROM alr.unjournaled_steps()$$,
  $$VALUES (0, 'telegram'::text, now() - interval '20 minutes'), (1, 'sms', now() - interval '20 minutes')$$,
  'a second step recorded keeps the oldest record time; both are listed');

SELECT isnt(alr.record_delivery((SELECT escalation_id FROM t2), 1, (SELECT lease_token FROM t2)), NULL, 'step 1 journaled');
SELECT results_eq($$SELECT step_idx FROM alr.unjournaled_steps()$$, $$VALUES (0)$$,
  'a journaled step leaves the list; the older one stays');
SELECT isnt(alr.record_delivery((SELECT escalation_id FROM t1), 0, (SELECT lease_token FROM t1), 'timeout'), NULL,
            'step 0 journaled as failed');
SELECT is_empty($$SELECT * FROM alr.unjournaled_steps(interval '0')$$, 'every step journaled: none listed');
SELECT is((SELECT unjournaled_since FROM alr.alert_escalations WHERE id = (SELECT id FROM fx)), NULL,
          'the ladder''s unjournaled_since is NULL again');

SELECT throws_ok($$SELECT * FROM alr.unjournaled_steps(NULL)$$, '22023',
  'unjournaled_steps: older_than must be between 0 and 366 days, got NULL', 'a NULL bound is refused');
SELECT throws_ok($$SELECT * FROM alr.unjournaled_steps(interval '-1 minute')$$, '22023',
  'unjournaled_steps: older_than must be between 0 and 366 days, got -00:01:00', 'a negative bound is refused');
SELECT ok(has_function_privilege('pgdrain_reader', 'alr.unjournaled_steps(interval)', 'EXECUTE')
          AND NOT has_function_privilege('pgdrain_producer', 'alr.unjournaled_steps(interval)', 'EXECUTE'),
          'readers, operators and workers may ask; producers may not');

SELECT * FROM finish();
ROLLBACK;
