-- add_alert refuses a name made only of Unicode white space or zero-width characters, whatever the
-- database's ctype, and a name over 1000 characters (alr 00010); 22023, nothing added.
BEGIN;
SELECT plan(5);
\ir ../_fixtures.sql

INSERT INTO state_before SELECT pg_temp.alr_state();
SELECT throws_ok($$SELECT alr.add_alert(E'\u1680\u2000\u200a\u2028\u2029\u202f\u205f\u3000\u180e\u200c\u200d\u2060')$$, '22023',
                 E'add_alert: name must be a non-empty text, got \'\u1680\u2000\u200a\u2028\u2029\u202f\u205f\u3000\u180e\u200c\u200d\u2060\'',
                 'a name of Unicode white space and zero-width characters is refused');
SELECT throws_ok(format('SELECT alr.add_alert(%L)', repeat('x', 100000)), '22023',
                 'add_alert: name must be at most 1000 characters, got 100000 characters', 'a name over 1000 characters is refused');
SELECT throws_ok(format('SELECT alr.add_alert(%L)', repeat('é', 1001)), '22023',
                 'add_alert: name must be at most 1000 characters, got 1001 characters', 'counted in characters');
SELECT is(pg_temp.alr_state(), (SELECT state FROM state_before), 'and nothing is added');
SELECT isnt(alr.add_alert(repeat('é', 1000)), NULL, 'a name of 1000 characters is accepted');

SELECT * FROM finish();
ROLLBACK;
