-- release_step gives a taken step back untouched: lease and token cleared, step_idx and next_at
-- kept, so the next take gets it at once. A wrong token returns false and changes nothing; NULL
-- arguments and unknown ids are errors.
BEGIN;
SELECT plan(8);
\ir ../_fixtures.sql

CREATE TEMP TABLE fx AS SELECT pg_temp.ladder() AS id;
INSERT INTO state_before SELECT pg_temp.row_of((SELECT id FROM fx));
CREATE TEMP TABLE t AS SELECT * FROM alr.take_due_steps();

CREATE TEMP TABLE leased AS SELECT pg_temp.row_of((SELECT id FROM fx)) AS r;
SELECT is(alr.release_step((SELECT id FROM fx), core.new_id()), false, 'a wrong token releases nothing');
SELECT is(pg_temp.row_of((SELECT id FROM fx)), (SELECT r FROM leased), 'the wrong token changed no column');
SELECT is(alr.release_step(t.escalation_id, t.lease_token), true, 'the holder releases its step') FROM t;
SELECT is(pg_temp.row_of((SELECT id FROM fx)), (SELECT state FROM state_before),
          'the released row is exactly as before the take');
SELECT is((SELECT count(*)::int FROM alr.take_due_steps()), 1, 'a released step is taken again at once');

SELECT throws_ok(format('SELECT alr.release_step(%L, NULL)', (SELECT id FROM fx)), '22023',
                 'release_step: lease_token must not be NULL, got NULL', 'a NULL token is an error');
SELECT throws_ok(format('SELECT alr.release_step(NULL, %L)', core.new_id()), '22023',
                 'release_step: escalation_id must not be NULL, got NULL', 'a NULL escalation_id is an error');
SELECT throws_ok('SELECT alr.release_step(''00000000-0000-0000-0000-000000000002'', core.new_id())', 'P0002',
                 'release_step: escalation_id must name an existing escalation, got 00000000-0000-0000-0000-000000000002',
                 'an unknown escalation is P0002');

SELECT * FROM finish();
ROLLBACK;
