-- A lease that ends more than a day after the clock (the longest lease a claim or a heartbeat hands
-- out) was written by a clock that has since been set back (NTP stepping back a clock that ran
-- ahead, a VM restored from a snapshot): it counts as over, in both claim modes, for the operator's
-- calls, the repair pass and the gauges, or a crashed worker's row waited as long as the clock had
-- jumped (the escalation ladder counts it as over since alr 00012). A lease within a day stays its
-- holder's, and the token still decides: the old holder's late result is refused once the row is
-- claimed again.
BEGIN;
SELECT plan(16);

CREATE TEMP TABLE q AS SELECT test_helpers.new_queue() AS u, test_helpers.new_queue('k') AS p;
SELECT test_helpers.add((SELECT u FROM q), 1);
SELECT test_helpers.add((SELECT p FROM q), 2, 'a');
SELECT test_helpers.add((SELECT p FROM q), 1, 'b');
SELECT lives_ok(format('UPDATE %s SET created_at = now() - interval ''1 minute''', (SELECT p FROM q)), 'events a minute old');
SET CONSTRAINTS outbox.pgdrain_commit IMMEDIATE;  -- what COMMIT would do: heads for the new keys
SET CONSTRAINTS outbox.pgdrain_commit DEFERRED;
CREATE TEMP TABLE held AS
  SELECT 'u' AS q, c.id, c.partition_key AS k, c.lease_token FROM outbox.claim_batch((SELECT u FROM q), 10, '1 minute') c
  UNION ALL
  SELECT 'p', c.id, c.partition_key, c.lease_token FROM outbox.claim_batch((SELECT p FROM q), 10, '1 minute') c;

SELECT lives_ok(format('UPDATE %s SET leased_until = now() + interval ''23 hours''', (SELECT u FROM q)),
                'a lease 23 hours ahead');
SELECT is_empty(format('SELECT * FROM outbox.claim_batch(%L)', (SELECT u FROM q)),
                'a lease ending within a day is still held');

-- The clock set back: the leases were written when it read two days later than it reads now.
SELECT lives_ok(format('UPDATE %s SET leased_until = now() + interval ''2 days'' WHERE lease_token IS NOT NULL', (SELECT u FROM q))
                || format('; UPDATE %s SET leased_until = now() + interval ''2 days'' WHERE lease_token IS NOT NULL', (SELECT p FROM q)),
                'the leases as written by a clock two days ahead');

SELECT results_eq(format('SELECT pending, ready, leased FROM outbox.stats(%L)', (SELECT u FROM q)),
                  $$VALUES (1::bigint, 1::bigint, 0::bigint)$$, 'stats counts such a row as ready, not leased');
SELECT is((SELECT reason FROM outbox.wedged_partitions((SELECT p FROM q), '1 second') WHERE partition_key = 'a'),
          'ready, waiting for a drainer', 'wedged_partitions calls its head ready');
SELECT ok(COALESCE(outbox.next_due((SELECT p FROM q)) <= clock_timestamp(), true)
          AND COALESCE(outbox.next_due((SELECT u FROM q)) <= clock_timestamp(), true),
          'next_due does not send a drainer to sleep until such a lease ends');

-- An operator's poison_row treats it as over too (a live lease is refused).
SELECT is(outbox.poison_row((SELECT p FROM q), (SELECT id FROM held WHERE q = 'p' AND k = 'a'), 0, 'peer rejects it'), true,
          'poison_row takes a row whose lease a clock set back wrote');

-- A head parked until such a lease ends (a result moved it onto a run's leased row) is found by
-- repair, as any head parked past its row's due time.
SELECT lives_ok(format($$
  UPDATE outbox.partition_heads h SET parked_until = now() + interval '2 days'
  FROM outbox.queues r WHERE r.queue = %L AND h.queue_id = r.queue_id AND h.partition_key = 'b'$$, (SELECT p FROM q)),
  'b''s head parked until its lease ends');
SELECT is((SELECT array_agg(cause) FROM outbox.repair((SELECT p FROM q), true) WHERE partition_key = 'b'),
          ARRAY['parked_past_due'], 'repair finds it parked past its row''s due time');
SELECT is((SELECT count(*)::int FROM outbox.repair((SELECT p FROM q))), 1, 'and repairs it');

-- Lock mode takes b's head; a's head is its next row, behind the poisoned one.
CREATE TEMP TABLE locked AS SELECT * FROM outbox.claim_locked((SELECT p FROM q), 10);
SELECT results_eq('SELECT partition_key, attempt_count FROM locked ORDER BY partition_key',
                  $$VALUES ('a'::text, 0), ('b', 0)$$,
                  'claim_locked takes the head whose lease a clock set back wrote, and a''s next row');
SELECT ok((SELECT id FROM held WHERE q = 'p' AND k = 'b') IN (SELECT id FROM locked), 'b''s head is the row leased before');

-- Lease mode takes it again, with a new token; the old one is refused.
CREATE TEMP TABLE again AS SELECT * FROM outbox.claim_batch((SELECT u FROM q), 10, '1 minute');
SELECT is((SELECT count(*)::int FROM again), 1, 'claim_batch takes an unpartitioned row whose lease a clock set back wrote');
SELECT isnt((SELECT lease_token FROM again), (SELECT lease_token FROM held WHERE q = 'u'), 'with a new token');
SELECT is(outbox.apply_result((SELECT u FROM q), (SELECT id FROM held WHERE q = 'u'), (SELECT lease_token FROM held WHERE q = 'u'), 'sent'),
          false, 'and the old holder''s late result is refused');

SELECT * FROM finish();
ROLLBACK;
