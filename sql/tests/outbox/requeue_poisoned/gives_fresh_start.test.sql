-- requeue_poisoned gives poisoned rows (all, or the given ids) a fresh start: attempt_count 0,
-- due now, error kept. On a partitioned queue the row goes to the tail of its key, as if committed
-- now: its successors, delivered or not, stay ahead of it (no resurrection of an old event).
BEGIN;
SELECT plan(7);

SELECT test_helpers.new_queue('k', max_attempts => 3) AS q \gset
SELECT test_helpers.add(:'q', 2, 'a') AS a \gset
SELECT test_helpers.add(:'q', 1, 'b') AS b \gset
CREATE TEMP TABLE c ON COMMIT DROP AS SELECT * FROM outbox.claim_batch(:'q', 10);
SELECT count(*) AS _ FROM c WHERE outbox.apply_result(:'q', id, lease_token, 'permanent', 'bad') \gset
SELECT is(test_helpers.ids_where(:'q', 'attempt_count = 3'), ARRAY[(:'a'::bigint[])[1], (:'b'::bigint[])[1]], 'two heads are poisoned');

SELECT is(outbox.requeue_poisoned(:'q', ARRAY[(:'a'::bigint[])[1]]), 1::bigint, 'requeue_poisoned with ids requeues just those');
SELECT results_eq(format($$SELECT attempt_count, next_attempt_at, last_error, id > %s FROM %s WHERE k = 'a' AND payload->>'i' = '1'$$,
                         (:'a'::bigint[])[2], :'q'),
  $$VALUES (0, NULL::timestamptz, 'bad'::text, true)$$,
  'the requeued row is fresh and due, its last error kept, and has an id past its key''s successor');
SELECT results_eq(format($$SELECT payload->>'i' FROM outbox.claim_batch(%L, 10) WHERE partition_key = 'a'$$, :'q'),
  $$VALUES ('2'::text)$$, 'the successor that was behind the poisoned row is claimed first');
SELECT count(*) AS _ FROM outbox.claim_batch(:'q', 10) \gset
SELECT test_helpers.expire_leases(:'q') AS _ \gset
CREATE TEMP TABLE c2 ON COMMIT DROP AS SELECT * FROM outbox.claim_batch(:'q', 10);
SELECT count(*) AS _ FROM c2 WHERE outbox.apply_result(:'q', id, lease_token, 'sent') \gset
SELECT results_eq(format($$SELECT payload->>'i', attempt_count FROM outbox.claim_batch(%L, 10) WHERE partition_key = 'a'$$, :'q'),
  $$VALUES ('1'::text, 0)$$, 'then the requeued row, at the tail of its key');
SELECT is(outbox.requeue_poisoned(:'q'), 1::bigint, 'requeue_poisoned without ids requeues every remaining poisoned row');
SELECT throws_ok(format('SELECT outbox.requeue_poisoned(%L, %L)', :'q', '{1,NULL}'), '22023',
  'requeue_poisoned: ids must not contain NULL', 'requeue_poisoned rejects a NULL id');

SELECT * FROM finish();
ROLLBACK;
