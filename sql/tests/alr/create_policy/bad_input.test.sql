-- create_policy validates everything before writing: name, the steps array and every step's delay
-- (a non-negative interval), channel and target (non-empty strings), no unknown keys. Each error is
-- SQLSTATE 22023 naming the argument (and the step); a rejected policy leaves no trace.
BEGIN;
SELECT plan(18);
\ir ../_fixtures.sql

INSERT INTO state_before SELECT pg_temp.alr_state();

SELECT throws_ok($$SELECT alr.create_policy(NULL, '[{"delay":"0s","channel":"telegram","target":"@x"}]')$$, '22023',
                 'create_policy: name must be a non-empty text, got NULL', 'a NULL name is rejected');
SELECT throws_ok($$SELECT alr.create_policy('  ', '[{"delay":"0s","channel":"telegram","target":"@x"}]')$$, '22023',
                 'create_policy: name must be a non-empty text, got ''  ''', 'a blank name is rejected');
SELECT throws_ok($$SELECT alr.create_policy('p', NULL)$$, '22023',
                 'create_policy: steps must be a JSON array of 1 to 100 steps, got NULL', 'NULL steps are rejected');
SELECT throws_ok($$SELECT alr.create_policy('p', '[]')$$, '22023',
                 'create_policy: steps must be a JSON array of 1 to 100 steps, got []', 'an empty array is rejected');
SELECT throws_ok($$SELECT alr.create_policy('p', '{"delay":"0s"}')$$, '22023',
                 'create_policy: steps must be a JSON array of 1 to 100 steps, got {"delay": "0s"}', 'an object is not an array');
SELECT throws_ok($$SELECT alr.create_policy('p', (SELECT jsonb_agg('{"delay":"0s","channel":"c","target":"t"}'::jsonb) FROM generate_series(1, 101)))$$,
                 '22023', 'create_policy: steps must be a JSON array of 1 to 100 steps, got an array of 101 elements',
                 'more than 100 steps are rejected, counted rather than echoed');
SELECT throws_ok($$SELECT alr.create_policy('p', jsonb_build_object('delay', repeat('x', 5000)))$$, '22023',
                 'create_policy: steps must be a JSON array of 1 to 100 steps, got {"delay": "' || repeat('x', 189) || '... (5013 characters)',
                 'a long argument is echoed by its first 200 characters and its length');
SELECT throws_ok($$SELECT alr.create_policy('p', jsonb_build_array(jsonb_build_object('delay', repeat('9', 500), 'channel', 'c', 'target', 't')))$$, '22023',
                 'create_policy: steps[0].delay must be a non-negative interval, got "' || repeat('9', 199) || '... (502 characters)',
                 'a long step value is echoed shortened');
SELECT throws_ok($$SELECT alr.create_policy('p', '["0s"]')$$, '22023',
                 'create_policy: steps[0] must be an object {"delay", "channel", "target"}, got "0s"', 'a step must be an object');
SELECT throws_ok($$SELECT alr.create_policy('p', '[{"delay":"0s","channel":"telegram","target":"@x"},{"delay":"soon","channel":"sms","target":"+1"}]')$$,
                 '22023', 'create_policy: steps[1].delay must be a non-negative interval, got "soon"',
                 'an unparsable delay is rejected, naming its step');
SELECT throws_ok($$SELECT alr.create_policy('p', '[{"delay":"-5 minutes","channel":"telegram","target":"@x"}]')$$,
                 '22023', 'create_policy: steps[0].delay must be a non-negative interval, got "-5 minutes"', 'a negative delay is rejected');
SELECT throws_ok($$SELECT alr.create_policy('p', '[{"delay":5,"channel":"telegram","target":"@x"}]')$$,
                 '22023', 'create_policy: steps[0].delay must be a non-negative interval, got 5', 'a delay must be a string');
SELECT throws_ok($$SELECT alr.create_policy('p', '[{"channel":"telegram","target":"@x"}]')$$,
                 '22023', 'create_policy: steps[0].delay must be a non-negative interval, got nothing', 'a missing delay is rejected');
SELECT throws_ok($$SELECT alr.create_policy('p', '[{"delay":"0s","channel":"","target":"@x"}]')$$,
                 '22023', 'create_policy: steps[0].channel must be a non-empty string, got ""', 'an empty channel is rejected');
SELECT throws_ok($$SELECT alr.create_policy('p', '[{"delay":"0s","channel":"telegram"}]')$$,
                 '22023', 'create_policy: steps[0].target must be a non-empty string, got nothing', 'a missing target is rejected');
SELECT throws_ok($$SELECT alr.create_policy('p', '[{"delay":"0s","channel":"telegram","target":null}]')$$,
                 '22023', 'create_policy: steps[0].target must be a non-empty string, got null', 'a null target is rejected');
SELECT throws_ok($$SELECT alr.create_policy('p', '[{"dealy":"0s","channel":"telegram","target":"@x"}]')$$,
                 '22023', 'create_policy: steps[0] must only have the keys delay, channel, target, got key ''dealy''',
                 'an unknown key (a typo) is rejected');
SELECT is(pg_temp.alr_state(), (SELECT state FROM state_before), 'no rejected policy left a trace');

SELECT * FROM finish();
ROLLBACK;
