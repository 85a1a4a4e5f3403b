-- claim_batch validates its arguments: unknown queue 42P01, bad names, batch_size outside
-- 1..10000 and a non-positive (or over a day) lease raise 22023 naming the argument, and lease nothing.
BEGIN;
SELECT plan(14);

SELECT test_helpers.new_queue('k') AS q \gset
SELECT test_helpers.add(:'q', 2, 'a') AS _ \gset
SELECT test_helpers.state(:'q') AS before \gset

SELECT throws_ok($$SELECT * FROM outbox.claim_batch('public.no_such_queue_t6')$$, '42P01',
  'claim_batch: queue public.no_such_queue_t6 is not registered (call outbox.create_queue first)',
  'claim_batch names an unknown queue with 42P01');
SELECT throws_ok($$SELECT * FROM outbox.claim_batch(NULL)$$, '22023', 'claim_batch: queue must not be NULL',
  'claim_batch rejects a NULL queue');
SELECT throws_ok($$SELECT * FROM outbox.claim_batch('public.x; drop table y')$$, '22023',
  'claim_batch: queue must be a plain name "schema.table" (letters, digits, _), got ''public.x; drop table y''',
  'claim_batch rejects a queue name carrying SQL');
SELECT throws_ok($$SELECT * FROM outbox.claim_batch('a.b.c')$$, '22023',
  'claim_batch: queue must be a plain name "schema.table" (letters, digits, _), got ''a.b.c''',
  'claim_batch rejects a three-part name');
SELECT throws_ok(format('SELECT * FROM outbox.claim_batch(%L, 0)', :'q'), '22023',
  'claim_batch: batch_size must be between 1 and 10000, got 0', 'claim_batch rejects batch_size 0');
SELECT throws_ok(format('SELECT * FROM outbox.claim_batch(%L, 10001)', :'q'), '22023',
  'claim_batch: batch_size must be between 1 and 10000, got 10001', 'claim_batch rejects batch_size 10001');
SELECT throws_ok(format('SELECT * FROM outbox.claim_batch(%L, -1)', :'q'), '22023',
  'claim_batch: batch_size must be between 1 and 10000, got -1', 'claim_batch rejects a negative batch_size');
SELECT throws_ok(format('SELECT * FROM outbox.claim_batch(%L, NULL)', :'q'), '22023',
  'claim_batch: batch_size must be between 1 and 10000, got NULL', 'claim_batch rejects a NULL batch_size');
SELECT throws_ok(format('SELECT * FROM outbox.claim_batch(%L, 10, %L)', :'q', '0'), '22023',
  'claim_batch: lease must be greater than 0 and at most 1 day, got 00:00:00', 'claim_batch rejects a zero lease');
SELECT throws_ok(format('SELECT * FROM outbox.claim_batch(%L, 10, %L)', :'q', '-5 seconds'), '22023',
  'claim_batch: lease must be greater than 0 and at most 1 day, got -00:00:05', 'claim_batch rejects a negative lease');
SELECT throws_ok(format('SELECT * FROM outbox.claim_batch(%L, 10, NULL)', :'q'), '22023',
  'claim_batch: lease must be greater than 0 and at most 1 day, got NULL', 'claim_batch rejects a NULL lease');
SELECT throws_ok(format('SELECT * FROM outbox.claim_batch(%L, 10, %L)', :'q', '25 hours'), '22023',
  'claim_batch: lease must be greater than 0 and at most 1 day, got 25:00:00', 'claim_batch rejects a lease over one day');
SELECT is(test_helpers.state(:'q'), :'before'::jsonb, 'the rejected claims leased nothing and changed nothing');

SELECT is((SELECT count(*) FROM outbox.claim_batch(:'q', 10000, '1 day')), 1::bigint,
          'the bounds themselves (batch_size 10000, lease 1 day) are accepted');

SELECT * FROM finish();
ROLLBACK;
