-- A step's unknown key is shown in the error as a long value is (alr._shown): its first 200
-- characters and its length, not a mistaken megabyte echoed whole into the error message and the
-- server log (alr 00011 did so for values, the keys were left whole). Nothing is created.
BEGIN;
SELECT plan(3);
\ir ../_fixtures.sql
INSERT INTO state_before SELECT pg_temp.alr_state();

SELECT throws_ok($$SELECT alr.create_policy('p', jsonb_build_array(jsonb_build_object(
    'delay', '0s', 'channel', 'sms', 'target', 'a', repeat('x', 1000000), 1)))$$,
  '22023', format('create_policy: steps[0] must only have the keys delay, channel, target, got key %s... (1000000 characters)',
                  quote_literal(repeat('x', 200))),
  'a megabyte key is shown by its first 200 characters and its length');
SELECT throws_ok($$SELECT alr.create_policy('p', '[{"delay": "0s", "channel": "sms", "target": "a", "tagret": "b"}]')$$,
  '22023', 'create_policy: steps[0] must only have the keys delay, channel, target, got key ''tagret''',
  'a short key is shown whole, as before');
SELECT is(pg_temp.alr_state(), (SELECT state FROM state_before), 'the refused calls changed nothing');

SELECT * FROM finish();
ROLLBACK;
