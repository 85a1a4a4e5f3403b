-- A DBA renames a queue's table away and makes another under the queue's name (a swap): the queue
-- still reads the renamed table, which holds its rows. create_queue of the name is refused with a
-- message saying so, and changes nothing; renaming back, or drop_queue first, are the ways on.
BEGIN;
SELECT plan(5);

SELECT test_helpers.new_queue('k') AS q \gset
SELECT split_part(:'q', '.', 2) AS t \gset
SELECT test_helpers.add(:'q', 2, 'a') AS ids \gset
SELECT format('ALTER TABLE %s RENAME TO %I', :'q', :'t' || '_old') \gexec
SELECT format('CREATE TABLE %s (LIKE %s INCLUDING ALL)', :'q', 'public.' || :'t' || '_old') \gexec
SELECT test_helpers.state(:'q') AS before \gset

SELECT throws_ok(format('SELECT outbox.create_queue(%L, %L)', :'q', 'k'), '22023',
  format('create_queue: queue %s is registered for table %s, which still exists (renamed?): rename it back to %s, or drop_queue(%L) first',
         :'q', 'public.' || :'t' || '_old', :'q', :'q'),
  'create_queue refuses a table made under the name of a queue whose table was renamed away');
SELECT is(test_helpers.state(:'q'), :'before'::jsonb, 'and changes nothing');
SELECT is((SELECT count(*) FROM outbox.claim_batch(:'q', 10)), 1::bigint, 'the queue still drains its renamed table');

SELECT format('DROP TABLE %s', :'q') \gexec
SELECT format('ALTER TABLE %I RENAME TO %I', :'t' || '_old', :'t') \gexec
SELECT lives_ok(format('SELECT outbox.create_queue(%L, %L)', :'q', 'k'), 'renamed back, create_queue runs again');
SELECT is((SELECT queue FROM outbox.queues WHERE table_oid = :'q'::regclass), :'q', 'with the same table');

SELECT * FROM finish();
ROLLBACK;
