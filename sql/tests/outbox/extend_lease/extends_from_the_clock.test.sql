-- A heartbeat inside a transaction that began a while ago extends the lease from the clock, not
-- from now() (the transaction's start): the new lease is never over before it is written.
BEGIN;
SELECT plan(3);

SELECT test_helpers.new_queue() AS q \gset
SELECT test_helpers.add(:'q', 1) AS r \gset
SELECT id, lease_token AS t FROM outbox.claim_batch(:'q', 1, '5 seconds') \gset
SELECT pg_sleep(0.4);
SELECT clock_timestamp() AS before_extend \gset
SELECT outbox.extend_lease(:'q', :id, :'t', '10 seconds') AS until \gset

SELECT ok(:'until'::timestamptz >= :'before_extend'::timestamptz + interval '10 seconds',
          'the new lease ends a whole lease after the heartbeat, not after the transaction''s start');
SELECT ok(:'until'::timestamptz <= clock_timestamp() + interval '10 seconds', 'and not later than that');
SELECT is((test_helpers.row_json(:'q', :id) ->> 'leased_until')::timestamptz, :'until'::timestamptz,
          'the row carries the lease end that extend_lease returned');

SELECT * FROM finish();
ROLLBACK;
