-- recorded_by names the step a token recorded (an engine whose apply's answer was lost delivers
-- it): NULL before the apply, for another token, once the alert is resolved or someone stopped the
-- ladder; the last step stays named after it completed the ladder. It changes nothing, and refuses
-- NULL arguments (22023) and an unknown escalation (P0002).
BEGIN;
SELECT plan(10);
\ir ../_fixtures.sql

CREATE TEMP TABLE fx AS SELECT pg_temp.ladder(2) AS id;
CREATE TEMP TABLE t1 AS SELECT * FROM alr.take_due_steps();
SELECT is(alr.recorded_by((SELECT escalation_id FROM t1), (SELECT lease_token FROM t1)), NULL,
          'taken, not yet recorded: NULL');
SELECT alr.apply_escalation((SELECT escalation_id FROM t1), (SELECT lease_token FROM t1));
INSERT INTO state_before SELECT pg_temp.alr_state();
SELECT is(alr.recorded_by((SELECT escalation_id FROM t1), (SELECT lease_token FROM t1)), 0,
          'recorded: the token names step 0');
SELECT is(pg_temp.alr_state(), (SELECT state FROM state_before), 'asking changed nothing');
SELECT is(alr.recorded_by((SELECT escalation_id FROM t1), gen_random_uuid()), NULL, 'another token: NULL');

UPDATE alr.alert_escalations SET next_at = now() WHERE id = (SELECT id FROM fx);
CREATE TEMP TABLE t2 AS SELECT * FROM alr.take_due_steps();
SELECT alr.apply_escalation((SELECT escalation_id FROM t2), (SELECT lease_token FROM t2));
SELECT is(alr.recorded_by((SELECT escalation_id FROM t2), (SELECT lease_token FROM t2)), 1,
          'the last step, which completed the ladder, is named');

SELECT alr.resolve_alert((SELECT alert_id FROM t1));
SELECT is(alr.recorded_by((SELECT escalation_id FROM t2), (SELECT lease_token FROM t2)), NULL,
          'once the alert is resolved: NULL, deliver nothing');

CREATE TEMP TABLE fy AS SELECT pg_temp.ladder(2) AS id;
CREATE TEMP TABLE t3 AS SELECT * FROM alr.take_due_steps();
SELECT alr.apply_escalation((SELECT escalation_id FROM t3), (SELECT lease_token FROM t3));
SELECT alr.acknowledge_alert((SELECT alert_id FROM t3), 'on it');
SELECT is(alr.recorded_by((SELECT escalation_id FROM t3), (SELECT lease_token FROM t3)), NULL,
          'once someone stopped the ladder: NULL');

SELECT throws_ok($$SELECT alr.recorded_by(NULL, gen_random_uuid())$$, '22023',
  'recorded_by: escalation_id must not be NULL, got NULL', 'a NULL escalation_id is refused');
SELECT throws_ok(format('SELECT alr.recorded_by(%L, NULL)', (SELECT id FROM fy)), '22023',
  'recorded_by: lease_token must not be NULL, got NULL', 'a NULL lease_token is refused');
SELECT throws_like($$SELECT alr.recorded_by(gen_random_uuid(), gen_random_uuid())$$,
  'recorded_by: escalation_id must name an existing escalation, got %', 'an unknown escalation is refused');

SELECT * FROM finish();
ROLLBACK;
