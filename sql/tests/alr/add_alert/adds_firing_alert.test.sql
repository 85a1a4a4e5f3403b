-- add_alert adds a firing alert and returns its id; a plain INSERT is equally valid. A NULL or
-- blank name is 22023 and adds nothing.
BEGIN;
SELECT plan(4);
\ir ../_fixtures.sql

CREATE TEMP TABLE a AS SELECT alr.add_alert('disk 95%') AS id;
SELECT results_eq(format('SELECT name, state, resolved_at FROM alr.alerts WHERE id = %L', (SELECT id FROM a)),
                  $$VALUES ('disk 95%', 'firing', NULL::timestamptz)$$, 'add_alert adds a firing alert');
WITH i AS (INSERT INTO alr.alerts (name) VALUES ('plain') RETURNING state)
SELECT is((SELECT state FROM i), 'firing', 'a plain INSERT makes a firing alert too');
INSERT INTO state_before SELECT pg_temp.alr_state();
SELECT throws_ok('SELECT alr.add_alert(NULL)', '22023', 'add_alert: name must be a non-empty text, got NULL',
                 'a NULL name is rejected');
SELECT is(pg_temp.alr_state(), (SELECT state FROM state_before), 'and adds nothing');

SELECT * FROM finish();
ROLLBACK;
