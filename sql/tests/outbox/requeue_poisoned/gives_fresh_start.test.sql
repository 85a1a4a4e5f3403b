-- requeue_poisoned gives poisoned rows (all, or the given ids) a fresh start: attempt_count 0,
-- due now, error kept; on a partitioned queue the row becomes its partition's head again.
BEGIN;
SELECT plan(6);

SELECT test_helpers.new_queue('k', max_attempts => 3) AS q \gset
SELECT test_helpers.add(:'q', 2, 'a') AS a \gset
SELECT test_helpers.add(:'q', 1, 'b') AS b \gset
CREATE TEMP TABLE c ON COMMIT DROP AS SELECT * FROM outbox.claim_batch(:'q', 10);
SELECT count(*) AS _ FROM c WHERE outbox.apply_result(:'q', id, lease_token, 'permanent', 'bad') \gset
SELECT is(test_helpers.ids_where(:'q', 'attempt_count = 3'), ARRAY[(:'a'::bigint[])[1], (:'b'::bigint[])[1]], 'two heads are poisoned');

SELECT is(outbox.requeue_poisoned(:'q', ARRAY[(:'a'::bigint[])[1]]), 1::bigint, 'requeue_poisoned with ids requeues just those');
SELECT results_eq(format('SELECT attempt_count, next_attempt_at, last_error FROM %s WHERE id = %s', :'q', (:'a'::bigint[])[1]),
  $$VALUES (0, NULL::timestamptz, 'bad'::text)$$, 'the requeued row is fresh and due, its last error kept');
SELECT test_helpers.expire_leases(:'q') AS _ \gset
SELECT results_eq(format('SELECT id FROM outbox.claim_batch(%L, 10)', :'q'), format('VALUES (%s::bigint)', (:'a'::bigint[])[1]),
  'the requeued row is its partition''s head again (ahead of its successor, which had been leased)');
SELECT is(outbox.requeue_poisoned(:'q'), 1::bigint, 'requeue_poisoned without ids requeues every remaining poisoned row');
SELECT throws_ok(format('SELECT outbox.requeue_poisoned(%L, %L)', :'q', '{1,NULL}'), '22023',
  'requeue_poisoned: ids must not contain NULL', 'requeue_poisoned rejects a NULL id');

SELECT * FROM finish();
ROLLBACK;
