-- A table is one queue: a registered table renamed keeps its queue (the registry follows the oid),
-- and create_queue under its new name is refused instead of registering it twice (two registrations
-- would each keep heads of the same rows).
BEGIN;
SELECT plan(3);

SELECT test_helpers.new_queue('k') AS q \gset
SELECT test_helpers.fresh_name() AS q2 \gset
SELECT format('ALTER TABLE %s RENAME TO %s', :'q', split_part(:'q2', '.', 2)) AS rename_it \gset
:rename_it;
SELECT throws_ok(format('SELECT outbox.create_queue(%L, %L)', :'q2', 'k'), '22023',
  format('create_queue: table %s is already registered as queue %s (renamed?); drop_queue(%L) first', :'q2', :'q', :'q'),
  'create_queue refuses a table that is registered under its old name');
SELECT lives_ok(format('SELECT * FROM outbox.claim_batch(%L)', :'q'), 'the queue keeps working under its old name');
SELECT lives_ok(format('SELECT outbox.drop_queue(%L); SELECT outbox.create_queue(%L, %L)', :'q', :'q2', 'k'),
                'after drop_queue it can be registered under the new one');

SELECT * FROM finish();
ROLLBACK;
