-- A lease that ends more than a day ahead (the longest take_due_steps hands out) was written by a
-- clock that has since been set back: the step is taken again at once, not after the jump. A lease
-- within a day stays someone's.
BEGIN;
SELECT plan(3);
\ir ../_fixtures.sql

CREATE TEMP TABLE fx AS SELECT pg_temp.ladder(1) AS id;
CREATE TEMP TABLE t1 AS SELECT * FROM alr.take_due_steps();
UPDATE alr.alert_escalations SET leased_until = now() + interval '23 hours' WHERE id = (SELECT id FROM fx);
SELECT is_empty('SELECT * FROM alr.take_due_steps()', 'a lease ending within a day is still held');
UPDATE alr.alert_escalations SET leased_until = now() + interval '50 years' WHERE id = (SELECT id FROM fx);
CREATE TEMP TABLE t2 AS SELECT * FROM alr.take_due_steps();
SELECT is((SELECT count(*)::int FROM t2), 1, 'a lease 50 years ahead counts as over: the step is taken');
SELECT is(alr.apply_escalation((SELECT escalation_id FROM t1), (SELECT lease_token FROM t1)), false,
          'and the old token is refused');

SELECT * FROM finish();
ROLLBACK;
