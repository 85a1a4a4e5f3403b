-- drop_queue unregisters a queue: registry row, partition heads and triggers go, the table and its
-- rows stay (unless drop_table); the queue can be created again.
BEGIN;
SELECT plan(11);

SELECT test_helpers.new_queue('k') AS q \gset
SELECT test_helpers.add(:'q', 2, 'a') AS a \gset
SELECT test_helpers.state(:'q') AS before \gset
SELECT throws_ok(format('SELECT outbox.drop_queue(%L, NULL)', :'q'), '22023', 'drop_queue: drop_table must not be NULL',
                 'drop_queue rejects a NULL drop_table');
SELECT is(test_helpers.state(:'q'), :'before'::jsonb, 'the rejected drop changed nothing');
SELECT lives_ok(format('SELECT outbox.drop_queue(%L)', :'q'), 'drop_queue unregisters a queue');
SELECT is_empty(format('SELECT 1 FROM outbox.queues WHERE queue = %L', :'q'), 'the registry row is gone');
SELECT is_empty($$SELECT 1 FROM outbox.partition_heads h WHERE NOT EXISTS (SELECT 1 FROM outbox.queues q WHERE q.queue_id = h.queue_id)$$,
                'no partition head is left without its queue');
SELECT is_empty(format('SELECT tgname FROM pg_trigger WHERE tgrelid = %L::regclass AND NOT tgisinternal', :'q'),
                'the queue triggers are gone');
SELECT is(test_helpers.ids_where(:'q', 'true'), :'a'::bigint[], 'the table and its rows stay');
SELECT throws_ok(format('SELECT * FROM outbox.claim_batch(%L)', :'q'), '42P01',
  format('claim_batch: queue %s is not registered (call outbox.create_queue first)', :'q'), 'a dropped queue can not be claimed from');
SELECT lives_ok(format('SELECT outbox.create_queue(%L, %L)', :'q', 'k'), 'the table can be adopted again');

SELECT lives_ok(format('SELECT outbox.drop_queue(%L, true)', :'q'), 'drop_queue with drop_table drops the table too');
SELECT is(to_regclass(:'q'), NULL, 'the table no longer exists');

SELECT * FROM finish();
ROLLBACK;
