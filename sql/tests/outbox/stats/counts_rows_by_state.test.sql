-- stats counts pending, ready, leased, backing_off and poisoned rows and the oldest pending row;
-- sent rows are not counted.
BEGIN;
SELECT plan(4);

SELECT test_helpers.new_queue(max_attempts => 3) AS q \gset
SELECT results_eq(format('SELECT pending, ready, leased, backing_off, poisoned, oldest_pending_at FROM outbox.stats(%L)', :'q'),
  $$VALUES (0::bigint, 0::bigint, 0::bigint, 0::bigint, 0::bigint, NULL::timestamptz)$$, 'an empty queue has all gauges at zero');

SELECT test_helpers.add(:'q', 6) AS r \gset
SELECT format($$UPDATE %1$s SET created_at = now() - interval '1 hour' WHERE id = %2$s;
                UPDATE %1$s SET sent_at = now(), created_at = now() - interval '2 hours' WHERE id = %3$s;
                UPDATE %1$s SET attempt_count = 3 WHERE id = %4$s;
                UPDATE %1$s SET attempt_count = 1, next_attempt_at = now() + interval '1 minute' WHERE id = %5$s$$,
              :'q', (:'r'::bigint[])[2], (:'r'::bigint[])[1], (:'r'::bigint[])[3], (:'r'::bigint[])[4]) AS ddl \gset
:ddl;
SELECT count(*) AS _ FROM outbox.claim_batch(:'q', 1) \gset
SELECT results_eq(format('SELECT pending, ready, leased, backing_off, poisoned FROM outbox.stats(%L)', :'q'),
  $$VALUES (4::bigint, 2::bigint, 1::bigint, 1::bigint, 1::bigint)$$,
  'stats: 4 pending (1 leased, 1 backing off, 2 ready), 1 poisoned, the sent row not counted');
SELECT results_eq(format('SELECT oldest_pending_at, oldest_pending_age FROM outbox.stats(%L)', :'q'),
  $$VALUES (now() - interval '1 hour', interval '1 hour')$$,
  'the oldest pending row is the one created an hour ago (not the older sent row)');
SELECT throws_ok($$SELECT * FROM outbox.stats('public.no_such_queue_t6')$$, '42P01',
  'stats: queue public.no_such_queue_t6 is not registered (call outbox.create_queue first)', 'stats names an unknown queue');

SELECT * FROM finish();
ROLLBACK;
