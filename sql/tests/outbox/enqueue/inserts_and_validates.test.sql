-- enqueue inserts one row (fresh: attempt 0, no lease) and returns its id; it requires a partition
-- key exactly when the queue is partitioned, and every bad input raises and inserts nothing.
BEGIN;
SELECT plan(13);

SELECT test_helpers.new_queue('k') AS p \gset
SELECT test_helpers.new_queue() AS u \gset
SELECT outbox.enqueue(:'p', 'order.created', '{"n": 1}', 'acct-1') AS pid \gset
SELECT results_eq(format('SELECT id, event_type, payload, k, attempt_count, next_attempt_at, sent_at, lease_token, leased_until, last_error, created_at FROM %s', :'p'),
  format($$VALUES (%s::bigint, 'order.created'::text, '{"n": 1}'::jsonb, 'acct-1'::text, 0, NULL::timestamptz, NULL::timestamptz, NULL::uuid, NULL::timestamptz, NULL::text, now())$$, :pid),
  'enqueue inserts a fresh row with its partition key and returns its id');
SET CONSTRAINTS outbox.pgdrain_commit IMMEDIATE; -- what COMMIT would do
SELECT results_eq(format($$SELECT h.partition_key, h.head_id FROM outbox.partition_heads h JOIN outbox.queues q USING (queue_id) WHERE q.queue = %L$$, :'p'),
  format($$VALUES ('acct-1'::text, %s::bigint)$$, :pid), 'the commit step creates the partition''s head');
SET CONSTRAINTS outbox.pgdrain_commit DEFERRED;
SELECT cmp_ok(outbox.enqueue(:'u', 'e', '{}'), '>', 0::bigint, 'enqueue on an unpartitioned queue needs no key');

SELECT test_helpers.state(:'p') AS pb \gset
SELECT test_helpers.state(:'u') AS ub \gset
SELECT throws_ok(format('SELECT outbox.enqueue(%L, %L, %L)', :'p', 'e', '{}'), '22023',
  format('enqueue: partition_key must not be NULL: queue %s is partitioned by k', :'p'), 'enqueue requires a key on a partitioned queue');
SELECT throws_ok(format('SELECT outbox.enqueue(%L, %L, %L, %L)', :'u', 'e', '{}', 'x'), '22023',
  format('enqueue: partition_key must be NULL: queue %s has no partition column', :'u'), 'enqueue refuses a key on an unpartitioned queue');
SELECT throws_ok(format('SELECT outbox.enqueue(%L, NULL, %L, %L)', :'p', '{}', 'x'), '22023',
  'enqueue: event_type must be a non-empty string', 'enqueue rejects a NULL event_type');
SELECT throws_ok(format('SELECT outbox.enqueue(%L, %L, %L, %L)', :'p', '  ', '{}', 'x'), '22023',
  'enqueue: event_type must be a non-empty string', 'enqueue rejects a blank event_type');
SELECT throws_ok(format('SELECT outbox.enqueue(%L, %L, %L, %L)', :'p', E'\t\n\u00a0', '{}', 'x'), '22023',
  'enqueue: event_type must be a non-empty string', 'enqueue rejects an event_type of tabs, line breaks and no-break spaces');
SELECT throws_ok(format('SELECT outbox.enqueue(%L, %L, NULL, %L)', :'p', 'e', 'x'), '22023',
  'enqueue: payload must not be NULL (use ''{}''::jsonb for an empty payload)', 'enqueue rejects a NULL payload');
SELECT throws_ok($$SELECT outbox.enqueue('public.no_such_queue_t6', 'e', '{}')$$, '42P01',
  'enqueue: queue public.no_such_queue_t6 is not registered (call outbox.create_queue first)', 'enqueue names an unknown queue');
SELECT throws_ok($$SELECT outbox.enqueue('public.x; drop table y', 'e', '{}')$$, '22023',
  'enqueue: queue must be a plain name "schema.table" (letters, digits, _), got ''public.x; drop table y''',
  'enqueue rejects a queue name carrying SQL');
SELECT is(test_helpers.state(:'p'), :'pb'::jsonb, 'the rejected calls inserted nothing and used no id (partitioned)');
SELECT is(test_helpers.state(:'u'), :'ub'::jsonb, 'the rejected calls inserted nothing and used no id (unpartitioned)');

SELECT * FROM finish();
ROLLBACK;
