-- claim_locked (lock mode) returns the same deliverable rows as claim_batch, in the same order and
-- with the same partition-head rule, but writes nothing: no lease, no token, no row version.
BEGIN;
SELECT plan(9);

SELECT test_helpers.new_queue('k') AS q \gset
SELECT test_helpers.add(:'q', 2, 'a') AS a \gset
SELECT test_helpers.add(:'q', 2, 'b') AS b \gset
SELECT test_helpers.add(:'q', 1, 'c') AS c \gset
SELECT format($$UPDATE %s SET next_attempt_at = now() + interval '1 minute', attempt_count = 1 WHERE id = %s$$,
              :'q', (:'c'::bigint[])[1]) AS ddl \gset
:ddl;
SELECT test_helpers.state(:'q') AS before \gset
SELECT test_helpers.updates_in_tx(:'q') AS upd_before \gset

CREATE TEMP TABLE l1 ON COMMIT DROP AS SELECT * FROM outbox.claim_locked(:'q', 10);
SELECT results_eq('SELECT id, partition_key, attempt_count FROM l1',
  format($$VALUES (%s::bigint, 'a'::text, 0), (%s, 'b', 0)$$, (:'a'::bigint[])[1], (:'b'::bigint[])[1]),
  'claim_locked returns the partition heads that are due, one per partition, in attempt_count, id order');
SELECT results_eq('SELECT event_type, payload, created_at FROM l1',
  format('SELECT event_type, payload, created_at FROM %s WHERE id IN (%s, %s) ORDER BY id', :'q', (:'a'::bigint[])[1], (:'b'::bigint[])[1]),
  'claim_locked returns the rows'' own columns');
SELECT is(test_helpers.state(:'q') -> 'rows', :'before'::jsonb -> 'rows', 'claim_locked writes no lease and no token');
SELECT is(test_helpers.updates_in_tx(:'q'), :upd_before::bigint, 'claim_locked writes no row version');
SELECT is(current_setting('pgdrain.held_' || (SELECT queue_id FROM outbox.queues WHERE queue = :'q')),
          format('%s,%s', (:'a'::bigint[])[1], (:'b'::bigint[])[1]),
          'the claimed ids are remembered for settle_locked in a transaction-local setting');
SELECT is_empty(format('SELECT * FROM outbox.claim_locked(%L, 10)', :'q'),
                'a second claim_locked in the same transaction does not hand out the rows it already holds');

SELECT test_helpers.new_queue() AS u \gset
SELECT test_helpers.add(:'u', 3) AS ur \gset
SELECT results_eq(format('SELECT id FROM outbox.claim_locked(%L, 2)', :'u'),
  format('VALUES (%s::bigint), (%s)', (:'ur'::bigint[])[1], (:'ur'::bigint[])[2]),
  'claim_locked respects batch_size on an unpartitioned queue');
SELECT throws_ok(format('SELECT * FROM outbox.claim_locked(%L, 0)', :'u'), '22023',
  'claim_locked: batch_size must be between 1 and 10000, got 0', 'claim_locked rejects batch_size 0');
SELECT throws_ok($$SELECT * FROM outbox.claim_locked('public.no_such_queue_t6')$$, '42P01',
  'claim_locked: queue public.no_such_queue_t6 is not registered (call outbox.create_queue first)',
  'claim_locked names an unknown queue with 42P01');

SELECT * FROM finish();
ROLLBACK;
