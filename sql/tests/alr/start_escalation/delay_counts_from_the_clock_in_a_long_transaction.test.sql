-- Step 0's delay counts from start_escalation, not from the start of the caller's transaction: a
-- producer that raises an alert in a transaction open for a while (a driver that opens them
-- implicitly, a long batch) gets step 0 due its delay after the call. Before, it counted from
-- now(): a "wait 5 minutes before paging" step raised in a transaction 5 minutes old paged at once.
BEGIN;
SELECT plan(2);
\ir ../_fixtures.sql

CREATE TEMP TABLE p AS SELECT alr.create_policy('delayed', '[
  {"delay": "5 minutes", "channel": "telegram", "target": "@oncall"}]') AS id;
SELECT pg_sleep(0.3);
CREATE TEMP TABLE started AS SELECT clock_timestamp() AS at;
CREATE TEMP TABLE fx AS SELECT alr.start_escalation(alr.add_alert('disk full'), (SELECT id FROM p)) AS id;
SELECT ok((SELECT next_at FROM alr.alert_escalations WHERE id = (SELECT id FROM fx))
            >= (SELECT at FROM started) + interval '5 minutes',
          'step 0 is due 5 minutes after start_escalation, not after the transaction began');
SELECT ok((SELECT next_at FROM alr.alert_escalations WHERE id = (SELECT id FROM fx))
            <= clock_timestamp() + interval '5 minutes',
          'and no later than 5 minutes from now');

SELECT * FROM finish();
ROLLBACK;
