-- channels_in_use lists every channel of every policy, with how many policies use it and how many
-- running ladders still have a step on it (current or later): the engine's start-up check.
BEGIN;
SELECT plan(3);
\ir ../_fixtures.sql
DELETE FROM alr.escalation_steps;
DELETE FROM alr.escalation_policies;

SELECT results_eq($$SELECT * FROM alr.channels_in_use()$$,
  $$SELECT NULL::text, NULL::bigint, NULL::bigint WHERE false$$,
  'channels_in_use is empty without policies');

-- Two policies of telegram then sms; one ladder running at step 0, one advanced past telegram.
SELECT pg_temp.ladder(2) AS a \gset
SELECT pg_temp.ladder(2) AS b \gset
UPDATE alr.alert_escalations SET step_idx = 1 WHERE id = :'b';
SELECT results_eq($$SELECT * FROM alr.channels_in_use()$$,
  $$VALUES ('sms'::text, 2::bigint, 2::bigint), ('telegram', 2, 1)$$,
  'channels_in_use counts policies per channel, and running ladders whose current or a later step uses it');

SELECT alr.resolve_alert(alert_id) FROM alr.alert_escalations WHERE id IN (:'a', :'b');
SELECT results_eq($$SELECT * FROM alr.channels_in_use()$$,
  $$VALUES ('sms'::text, 2::bigint, 0::bigint), ('telegram', 2, 0)$$,
  'a stopped ladder counts no more; its policies still do');

SELECT * FROM finish();
ROLLBACK;
