-- 'permanent' poisons the row (attempt_count = max_attempts, error kept, no next attempt) unless
-- the queue's policy is 'retry' (unpartitioned only), where it is retried with backoff.
BEGIN;
SELECT plan(7);

SELECT test_helpers.new_queue('k', max_attempts => 5) AS p \gset
SELECT test_helpers.add(:'p', 1, 'a') AS pa \gset
SELECT lease_token AS pt FROM outbox.claim_batch(:'p') \gset
SELECT ok(outbox.apply_result(:'p', (:'pa'::bigint[])[1], :'pt', 'permanent', '400 bad request'),
          'a permanent failure is recorded on a partitioned queue');
SELECT results_eq(format('SELECT attempt_count, next_attempt_at, last_error, lease_token, leased_until, sent_at FROM %s', :'p'),
                  $$VALUES (5, NULL::timestamptz, '400 bad request'::text, NULL::uuid, NULL::timestamptz, NULL::timestamptz)$$,
                  'the row is poisoned at once: attempt_count = max_attempts, error kept, lease cleared, not sent');
SELECT is_empty(format('SELECT * FROM outbox.claim_batch(%L)', :'p'), 'a poisoned row is not claimed');

SELECT test_helpers.new_queue(max_attempts => 5) AS u \gset
SELECT test_helpers.add(:'u', 1) AS ua \gset
SELECT lease_token AS ut FROM outbox.claim_batch(:'u') \gset
SELECT outbox.apply_result(:'u', (:'ua'::bigint[])[1], :'ut', 'permanent', 'gone') AS _ \gset
SELECT results_eq(format('SELECT attempt_count, next_attempt_at, last_error FROM %s', :'u'),
                  $$VALUES (5, NULL::timestamptz, 'gone'::text)$$,
                  'with the default policy an unpartitioned row is poisoned too');

SELECT test_helpers.new_queue(max_attempts => 5, permanent_policy => 'retry') AS r \gset
SELECT test_helpers.add(:'r', 1) AS ra \gset
SELECT lease_token AS rt FROM outbox.claim_batch(:'r') \gset
SELECT ok(outbox.apply_result(:'r', (:'ra'::bigint[])[1], :'rt', 'permanent', 'gone'),
          'a permanent failure is recorded on a retry-policy queue');
SELECT results_eq(format('SELECT attempt_count, next_attempt_at > now(), last_error, lease_token FROM %s', :'r'),
                  $$VALUES (1, true, 'gone'::text, NULL::uuid)$$,
                  'with policy retry a permanent failure counts one attempt and backs off instead of poisoning');
SELECT test_helpers.end_backoff(:'r') AS _ \gset
SELECT is((SELECT count(*) FROM outbox.claim_batch(:'r')), 1::bigint, 'and the row is claimed again after its backoff');

SELECT * FROM finish();
ROLLBACK;
