-- An interval whose months, days and time have opposite signs compares as one span and adds to the
-- clock as another: a lease of '-12000 mons 360001 days' is "greater than 0 and at most 1 day" to
-- PostgreSQL's comparison and ended 14 years ago, so the next take handed the same step out again
-- (two deliveries of a step the ladder delivers at most once). take_due_steps and create_policy's
-- step delays refuse such values (22023, naming the argument), as do blank names and notes of white
-- space only and a delay over ten years (start_escalation then failed with a bare 22008); a refused
-- call changes nothing.
BEGIN;
SELECT plan(9);
\ir ../_fixtures.sql

SELECT pg_temp.ladder();
INSERT INTO state_before SELECT pg_temp.alr_state();

SELECT throws_ok($$SELECT * FROM alr.take_due_steps(10, '-12000 mons 360001 days')$$, '22023',
  'take_due_steps: lease must not mix signs across its months, days and time (a month or a day has no fixed length), got -1000 years +360001 days',
  'a lease that compares as a day and ended in the past is refused');
SELECT throws_ok($$SELECT alr.create_policy('p', '[{"delay":"1 mon -29 days","channel":"c","target":"t"}]')$$, '22023',
  'create_policy: steps[0].delay must not mix signs across its months, days and time (a month or a day has no fixed length), got 1 mon -29 days',
  'a step delay of mixed signs is refused, naming the step');
SELECT throws_ok($$SELECT alr.create_policy('p', '[{"delay":"1000000 years","channel":"c","target":"t"}]')$$, '22023',
  'create_policy: steps[0].delay must be at most 3650 days, got 1000000 years', 'a step delay over ten years is refused');
SELECT throws_ok($$SELECT alr.create_policy(E'\t\n', '[{"delay":"0s","channel":"c","target":"t"}]')$$, '22023', NULL,
  'a policy name of a tab and a line break is refused');
SELECT throws_ok($$SELECT alr.create_policy('p', '[{"delay":"0s","channel":"\u00a0","target":"t"}]')$$, '22023', NULL,
  'a channel of a no-break space is refused');
SELECT throws_ok($$SELECT alr.add_alert(E'\t')$$, '22023', NULL, 'an alert name of a tab is refused');
SELECT throws_ok(format($$SELECT alr.acknowledge_alert(%L, E'\n\t')$$, (SELECT id FROM alr.alerts LIMIT 1)), '22023', NULL,
  'a note of white space only is refused');
SELECT is(pg_temp.alr_state(), (SELECT state FROM state_before), 'the refused calls changed nothing');

SELECT is((SELECT count(*)::int FROM alr.take_due_steps(10, '2 minutes')), 1, 'a plain lease still takes the step');

SELECT * FROM finish();
ROLLBACK;
