-- take_due_steps reads due times and leases from the clock, not from the start of the caller's
-- transaction: in a transaction open for a while (a driver that opens them implicitly), a step
-- that fell due meanwhile is taken, and the lease it hands out ends `lease` after the take, not
-- already over.
BEGIN;
SELECT plan(3);
\ir ../_fixtures.sql

CREATE TEMP TABLE fx AS SELECT pg_temp.ladder() AS id;
-- Due 0.3 s after this transaction began.
UPDATE alr.alert_escalations SET next_at = now() + interval '300 milliseconds' WHERE id = (SELECT id FROM fx);
SELECT pg_sleep(0.5);
CREATE TEMP TABLE taken AS SELECT * FROM alr.take_due_steps(100, interval '200 milliseconds');
SELECT is((SELECT count(*)::int FROM taken), 1, 'a step due after the transaction began is taken');
SELECT ok((SELECT leased_until FROM taken) > clock_timestamp(),
          'its lease ends after the take returned (from now(), it was already over)');
SELECT ok((SELECT leased_until FROM taken) >= now() + interval '700 milliseconds',
          'the lease counts from the take''s clock');

SELECT * FROM finish();
ROLLBACK;
