-- create_queue is idempotent: a second call with the same settings changes nothing (rows, heads,
-- indexes, triggers, registry); a call with new settings only updates the registry; the partition
-- column of a registered queue can not change.
BEGIN;
SELECT plan(10);

SELECT test_helpers.new_queue('resource_id') AS q \gset
SELECT test_helpers.add(:'q', 3, 'a') AS a_ids \gset
SELECT test_helpers.add(:'q', 2, 'b') AS b_ids \gset
SELECT count(*) AS claimed FROM outbox.claim_batch(:'q', 1) \gset
SELECT test_helpers.state(:'q') AS before \gset

SELECT lives_ok(format('SELECT outbox.create_queue(%L, %L)', :'q', 'resource_id'),
                'create_queue can be called a second time with the same settings');
SELECT is(test_helpers.state(:'q'), :'before'::jsonb,
          'the second call changes nothing: rows, partition heads, indexes, triggers and registry are identical');
SELECT lives_ok(format('SELECT outbox.create_queue(%L, %L)', :'q', 'resource_id'),
                'create_queue can be called a third time');
SELECT is(test_helpers.state(:'q'), :'before'::jsonb, 'the third call changes nothing either');

SELECT lives_ok(format('SELECT outbox.create_queue(%L, %L, 7, %L, %L)', :'q', 'resource_id', '5 seconds', '2 minutes'),
                'create_queue with new settings succeeds on a registered queue');
SELECT results_eq(
  format('SELECT max_attempts, backoff_min, backoff_max FROM outbox.queues WHERE queue = %L', :'q'),
  $$VALUES (7, interval '5 seconds', interval '2 minutes')$$,
  'a call with new settings updates them in the registry');
SELECT is(test_helpers.state(:'q') - 'registry', :'before'::jsonb - 'registry',
          'a call with new settings leaves rows, heads, indexes and triggers alone');

SELECT test_helpers.state(:'q') AS before2 \gset
SELECT throws_ok(format('SELECT outbox.create_queue(%L, %L)', :'q', 'tenant'), '22023',
  format('create_queue: partition_column of registered queue %s is resource_id and can not change to tenant (drop_queue first)', :'q'),
  'create_queue refuses to change the partition column of a registered queue');
SELECT throws_ok(format('SELECT outbox.create_queue(%L)', :'q'), '22023',
  format('create_queue: partition_column of registered queue %s is resource_id and can not change to NULL (drop_queue first)', :'q'),
  'create_queue refuses to make a partitioned queue unpartitioned');
SELECT is(test_helpers.state(:'q'), :'before2'::jsonb, 'the refused calls changed nothing');

SELECT * FROM finish();
ROLLBACK;
