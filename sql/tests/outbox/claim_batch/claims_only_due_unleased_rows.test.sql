-- claim_batch takes only deliverable rows: unsent, not poisoned, due (next_attempt_at at or before
-- the claim), and not leased (or lease expired). Each gets leased_until = the claim's clock + lease.
BEGIN;
SELECT plan(8);

SELECT test_helpers.new_queue(max_attempts => 3) AS q \gset
SELECT test_helpers.add(:'q', 7) AS r \gset
-- r1 backing off, r2 leased by someone, r3 sent, r4 poisoned, r5 fresh, r6 due in the past, r7 due exactly now.
SELECT format($$UPDATE %1$s SET next_attempt_at = now() + interval '1 minute', attempt_count = 1 WHERE id = %2$s;
                UPDATE %1$s SET lease_token = gen_random_uuid(), leased_until = now() + interval '10 seconds' WHERE id = %3$s;
                UPDATE %1$s SET sent_at = now() WHERE id = %4$s;
                UPDATE %1$s SET attempt_count = 3 WHERE id = %5$s;
                UPDATE %1$s SET next_attempt_at = now() - interval '1 second', attempt_count = 1 WHERE id = %6$s;
                UPDATE %1$s SET next_attempt_at = now() WHERE id = %7$s$$,
              :'q', (:'r'::bigint[])[1], (:'r'::bigint[])[2], (:'r'::bigint[])[3], (:'r'::bigint[])[4],
              (:'r'::bigint[])[6], (:'r'::bigint[])[7]) AS ddl \gset
:ddl;
SELECT test_helpers.row_json(:'q', (:'r'::bigint[])[2]) AS leased_before \gset

SELECT clock_timestamp() AS before_claim \gset
SELECT results_eq(
  format('SELECT id FROM outbox.claim_batch(%L, 100, %L)', :'q', '45 seconds'),
  format($$VALUES (%s::bigint), (%s), (%s)$$, (:'r'::bigint[])[5], (:'r'::bigint[])[7], (:'r'::bigint[])[6]),
  'only the fresh, the due-now and the overdue rows are claimed: not backing off, leased, sent or poisoned ones');
SELECT is(test_helpers.ids_where(:'q', format($$leased_until BETWEEN %L::timestamptz + interval '45 seconds'
                                                 AND clock_timestamp() + interval '45 seconds' AND lease_token IS NOT NULL$$,
                                          :'before_claim')),
          ARRAY[(:'r'::bigint[])[5], (:'r'::bigint[])[6], (:'r'::bigint[])[7]],
          'each claimed row is leased until the claim''s clock + lease with a token');
SELECT is(test_helpers.row_json(:'q', (:'r'::bigint[])[2]), :'leased_before'::jsonb,
          'a row leased by someone else is left untouched');
SELECT is(test_helpers.ids_where(:'q', 'lease_token IS NULL AND leased_until IS NULL'),
          ARRAY[(:'r'::bigint[])[1], (:'r'::bigint[])[3], (:'r'::bigint[])[4]],
          'rows that were not claimed got no lease');
SELECT is_empty(format('SELECT * FROM outbox.claim_batch(%L, 100)', :'q'), 'a second claim finds nothing');

-- The claim's returned columns are the row's.
SELECT test_helpers.new_queue() AS q2 \gset
SELECT outbox.enqueue(:'q2', 'order.created', '{"order": 42}') AS id2 \gset
CREATE TEMP TABLE claimed2 ON COMMIT DROP AS SELECT * FROM outbox.claim_batch(:'q2');
SELECT results_eq(
  'SELECT id, event_type, payload, partition_key, attempt_count, lease_token, leased_until, created_at FROM claimed2',
  format('SELECT id, event_type, payload, NULL::text, attempt_count, lease_token, leased_until, created_at FROM %s', :'q2'),
  'claim_batch returns the row''s columns and its new lease (partition_key NULL when unpartitioned)');
SELECT is(test_helpers.ids_where(:'q2', $$leased_until BETWEEN now() + interval '30 seconds'
                                                        AND clock_timestamp() + interval '30 seconds'$$), ARRAY[:id2::bigint],
          'the default lease is 30 seconds');

SELECT test_helpers.new_queue() AS q3 \gset
SELECT is_empty(format('SELECT * FROM outbox.claim_batch(%L)', :'q3'), 'an empty queue yields an empty batch');

SELECT * FROM finish();
ROLLBACK;
