-- requeue_poisoned refuses ids it can not read as a list, naming the argument, and changes nothing.
BEGIN;
SELECT plan(3);

SELECT test_helpers.new_queue('k', 1) AS q \gset
SELECT test_helpers.add(:'q', 2, 'a') AS ids \gset
SELECT format('UPDATE %s SET attempt_count = 1', :'q') \gexec
SELECT test_helpers.state(:'q') AS before \gset

SELECT throws_ok(format('SELECT outbox.requeue_poisoned(%L, %L::bigint[])', :'q', '{{1,2}}'), '22023',
  'requeue_poisoned: ids must be a one-dimensional array, got 2 dimensions', 'a two-dimensional array is refused');
SELECT throws_ok(format('SELECT outbox.requeue_poisoned(%L, %L::bigint[])', :'q', '{1,NULL}'), '22023',
  'requeue_poisoned: ids must not contain NULL', 'a NULL id is refused');
SELECT is(test_helpers.state(:'q'), :'before'::jsonb, 'the refused calls changed nothing');

SELECT * FROM finish();
ROLLBACK;
