-- take_due_steps rejects a non-positive, NULL or too large batch_size and lease with SQLSTATE 22023
-- and a message naming the argument; a rejected call leases nothing.
BEGIN;
SELECT plan(9);
\ir ../_fixtures.sql

SELECT pg_temp.ladder();
INSERT INTO state_before SELECT pg_temp.alr_state();

SELECT throws_ok('SELECT * FROM alr.take_due_steps(0)', '22023',
                 'take_due_steps: batch_size must be between 1 and 10000, got 0', 'batch_size 0 is rejected');
SELECT throws_ok('SELECT * FROM alr.take_due_steps(-5)', '22023',
                 'take_due_steps: batch_size must be between 1 and 10000, got -5', 'a negative batch_size is rejected');
SELECT throws_ok('SELECT * FROM alr.take_due_steps(10001)', '22023',
                 'take_due_steps: batch_size must be between 1 and 10000, got 10001', 'a too large batch_size is rejected');
SELECT throws_ok('SELECT * FROM alr.take_due_steps(NULL)', '22023',
                 'take_due_steps: batch_size must be between 1 and 10000, got NULL', 'a NULL batch_size is rejected');
SELECT throws_ok($$SELECT * FROM alr.take_due_steps(10, '0 seconds')$$, '22023',
                 'take_due_steps: lease must be greater than 0 and at most 1 day, got 00:00:00', 'a zero lease is rejected');
SELECT throws_ok($$SELECT * FROM alr.take_due_steps(10, '-1 minute')$$, '22023',
                 'take_due_steps: lease must be greater than 0 and at most 1 day, got -00:01:00', 'a negative lease is rejected');
SELECT throws_ok($$SELECT * FROM alr.take_due_steps(10, '2 days')$$, '22023',
                 'take_due_steps: lease must be greater than 0 and at most 1 day, got 2 days', 'a lease over a day is rejected');
SELECT throws_ok('SELECT * FROM alr.take_due_steps(10, NULL)', '22023',
                 'take_due_steps: lease must be greater than 0 and at most 1 day, got NULL', 'a NULL lease is rejected');
SELECT is(pg_temp.alr_state(), (SELECT state FROM state_before), 'the rejected takes changed nothing');

SELECT * FROM finish();
ROLLBACK;
