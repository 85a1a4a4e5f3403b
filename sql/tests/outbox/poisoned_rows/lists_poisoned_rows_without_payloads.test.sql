-- poisoned_rows lists a queue's poisoned rows, newest first, a page at a time, with their error and
-- event_id; a payload preview only for a login that may read the payload (operators may not).
BEGIN;
SELECT plan(6);

SELECT test_helpers.new_queue('k', max_attempts => 3) AS q \gset
SELECT test_helpers.add(:'q', 3, 'a') AS a \gset
SELECT test_helpers.add(:'q', 1, 'b') AS b \gset
CREATE TEMP TABLE c ON COMMIT DROP AS SELECT * FROM outbox.claim_batch(:'q', 10);
SELECT count(*) AS _ FROM c WHERE outbox.apply_result(:'q', id, lease_token, 'permanent', 'peer said 422') \gset
SELECT results_eq(format($$SELECT id, partition_key, attempt_count, last_error FROM outbox.poisoned_rows(%L)$$, :'q'),
  format($$VALUES (%s::bigint, 'b'::text, 3, 'peer said 422'::text), (%s, 'a', 3, 'peer said 422')$$,
         (:'b'::bigint[])[1], (:'a'::bigint[])[1]),
  'the poisoned heads, newest first, with their error (their successors are pending, not poisoned)');
SELECT results_eq(format($$SELECT id FROM outbox.poisoned_rows(%L, 1, %s)$$, :'q', (:'b'::bigint[])[1]),
  format($$VALUES (%s::bigint)$$, (:'a'::bigint[])[1]), 'before_id and max_rows page through them');
SELECT ok((SELECT bool_and(payload_preview = '{"i": 1}') FROM outbox.poisoned_rows(:'q')),
  'the table owner sees a payload preview');
SELECT ok((SELECT bool_and(event_id IS NOT NULL) FROM outbox.poisoned_rows(:'q')), 'each row has its event_id');
SELECT throws_ok(format($$SELECT * FROM outbox.poisoned_rows(%L, 0)$$, :'q'), '22023',
  'poisoned_rows: max_rows must be between 1 and 1000, got 0', 'max_rows is bounded');
SELECT throws_ok($$SELECT * FROM outbox.poisoned_rows('public.no_such_queue')$$, '42P01', NULL, 'an unknown queue is refused');

SELECT * FROM finish();
ROLLBACK;
