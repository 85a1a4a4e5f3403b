-- extend_lease moves leased_until to the clock + lease only for the token holder and returns it;
-- any other token gets NULL and the row is unchanged. Bad input raises and changes nothing.
BEGIN;
SELECT plan(10);

SELECT test_helpers.new_queue('k') AS q \gset
SELECT test_helpers.add(:'q', 1, 'a') AS a \gset
SELECT (:'a'::bigint[])[1] AS id \gset
SELECT lease_token AS t FROM outbox.claim_batch(:'q', 10, '10 seconds') \gset

SELECT clock_timestamp() AS before_extend \gset
SELECT outbox.extend_lease(:'q', :id, :'t', '2 minutes') AS until \gset
SELECT ok(:'until'::timestamptz BETWEEN :'before_extend'::timestamptz + interval '2 minutes' AND clock_timestamp() + interval '2 minutes',
          'the holder extends its lease and gets the new leased_until (the clock + lease)');
SELECT results_eq(format('SELECT leased_until, lease_token, attempt_count FROM %s', :'q'),
                  format($$VALUES (%L::timestamptz, %L::uuid, 0)$$, :'until', :'t'),
                  'the row carries the new lease, the same token, and no attempt');
SELECT is(outbox.next_due(:'q'), :'until'::timestamptz,
          'next_due says the row comes back when the new lease ends (its head is not parked: claims write only the row)');
SELECT test_helpers.state(:'q') AS before \gset
SELECT is(outbox.extend_lease(:'q', :id, gen_random_uuid(), '1 hour'), NULL, 'a foreign token gets NULL');
SELECT is(test_helpers.state(:'q'), :'before'::jsonb, 'and the row and its head are unchanged');

SELECT throws_ok(format('SELECT outbox.extend_lease(%L, %s, %L, %L)', :'q', :id, :'t', '0'), '22023',
  'extend_lease: lease must be greater than 0 and at most 1 day, got 00:00:00', 'extend_lease rejects a zero lease');
SELECT throws_ok(format('SELECT outbox.extend_lease(%L, %s, %L, %L)', :'q', :id, :'t', '-1 minute'), '22023',
  'extend_lease: lease must be greater than 0 and at most 1 day, got -00:01:00', 'extend_lease rejects a negative lease');
SELECT throws_ok(format('SELECT outbox.extend_lease(%L, %s, NULL, %L)', :'q', :id, '1 minute'), '22023',
  'extend_lease: lease_token must not be NULL', 'extend_lease rejects a NULL token');
SELECT throws_ok(format('SELECT outbox.extend_lease(%L, %s, %L, %L)', 'public.no_such_queue_t6', :id, :'t', '1 minute'), '42P01',
  'extend_lease: queue public.no_such_queue_t6 is not registered (call outbox.create_queue first)',
  'extend_lease names an unknown queue with 42P01');
SELECT is(test_helpers.state(:'q'), :'before'::jsonb, 'the rejected calls changed nothing');

SELECT * FROM finish();
ROLLBACK;
