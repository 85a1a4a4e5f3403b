-- A queue whose table was dropped outside drop_queue is refused with 42P01 by every function that
-- uses it (claims, results, producers, operators), naming the queue and the two ways out, instead
-- of acting on a stale oid; create_queue registers the new table and the queue works again.
BEGIN;
SELECT plan(7);

SELECT test_helpers.new_queue('k') AS q \gset
SELECT test_helpers.add(:'q', 2, 'a') IS NULL AS _ \gset
SELECT format('DROP TABLE %s', :'q') AS drop_it \gset
:drop_it;
SELECT format('%%s: the table of queue %s no longer exists (dropped outside outbox.drop_queue): call outbox.create_queue to register it again, or outbox.drop_queue', :'q') AS msg \gset

SELECT throws_ok(format('SELECT * FROM outbox.claim_batch(%L)', :'q'), '42P01', format(:'msg', 'claim_batch'),
                 'claim_batch refuses a queue whose table is gone');
SELECT throws_ok(format('SELECT * FROM outbox.claim_locked(%L)', :'q'), '42P01', format(:'msg', 'claim_locked'),
                 'claim_locked refuses it');
SELECT throws_ok(format('SELECT outbox.apply_result(%L, 1, gen_random_uuid(), %L)', :'q', 'sent'), '42P01',
                 format(:'msg', 'apply_result'), 'apply_result refuses it');
SELECT throws_ok(format('SELECT outbox.enqueue(%L, %L, %L, %L)', :'q', 'e', '{}', 'a'), '42P01', format(:'msg', 'enqueue'),
                 'enqueue refuses it');
SELECT throws_ok(format('SELECT * FROM outbox.stats(%L)', :'q'), '42P01', format(:'msg', 'stats'),
                 'stats refuses it');

SELECT lives_ok(format('SELECT outbox.create_queue(%L, %L)', :'q', 'k'), 'create_queue registers a new table');
SELECT lives_ok(format('SELECT * FROM outbox.claim_batch(%L)', :'q'), 'and the queue works again');

SELECT * FROM finish();
ROLLBACK;
