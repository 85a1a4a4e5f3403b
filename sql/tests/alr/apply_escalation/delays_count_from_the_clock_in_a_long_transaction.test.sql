-- The next step's delay counts from apply_escalation, not from the start of the caller's
-- transaction: in a transaction open for a while (a driver that opens them implicitly, as
-- take_due_steps' leases allow for), the next step is due its delay after the record. Before, it
-- counted from now(): a step due 5 minutes after a record made in a transaction 5 minutes old paged
-- at once, the policy's delay skipped.
BEGIN;
SELECT plan(3);
\ir ../_fixtures.sql

-- Step 0 after 5 minutes, step 1 after 5 minutes more.
CREATE TEMP TABLE p AS SELECT alr.create_policy('delayed', '[
  {"delay": "5 minutes", "channel": "telegram", "target": "@oncall"},
  {"delay": "5 minutes", "channel": "sms", "target": "+15550100"}]') AS id;
CREATE TEMP TABLE fx AS SELECT alr.start_escalation(alr.add_alert('disk full'), (SELECT id FROM p)) AS id;

-- Step 0 comes due (moved back: time passes slowly here); it is taken and recorded 0.3 s later.
UPDATE alr.alert_escalations SET next_at = now() WHERE id = (SELECT id FROM fx);
SELECT pg_sleep(0.3);
CREATE TEMP TABLE t1 AS SELECT * FROM alr.take_due_steps();
CREATE TEMP TABLE recorded AS SELECT clock_timestamp() AS at;
SELECT is(alr.apply_escalation((SELECT escalation_id FROM t1), (SELECT lease_token FROM t1)), true, 'step 0 recorded');
SELECT ok((SELECT next_at FROM alr.alert_escalations WHERE id = (SELECT id FROM fx))
            >= (SELECT at FROM recorded) + interval '5 minutes',
          'step 1 is due 5 minutes after the record, not after the transaction began');
SELECT ok((SELECT next_at FROM alr.alert_escalations WHERE id = (SELECT id FROM fx))
            <= clock_timestamp() + interval '5 minutes',
          'and no later than 5 minutes from now');

SELECT * FROM finish();
ROLLBACK;
