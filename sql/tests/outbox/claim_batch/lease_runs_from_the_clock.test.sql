-- On an unpartitioned queue a claim inside a transaction that began a while ago still hands out a
-- whole lease, and sees leases and backoffs that ended since the transaction began: due times and
-- leases are read from the clock at the claim, not from now() (the transaction's start). The
-- partitioned path has its own test (partitioned_lease_runs_from_the_clock).
BEGIN;
SELECT plan(4);

SELECT test_helpers.new_queue() AS q \gset
SELECT test_helpers.add(:'q', 3) AS r \gset
-- r1 leased by someone until 100 ms after the transaction began, r2 backing off as long.
SELECT format($$UPDATE %1$s SET lease_token = gen_random_uuid(), leased_until = now() + interval '100 milliseconds' WHERE id = %2$s;
                UPDATE %1$s SET next_attempt_at = now() + interval '100 milliseconds', attempt_count = 1 WHERE id = %3$s$$,
              :'q', (:'r'::bigint[])[1], (:'r'::bigint[])[2]) AS ddl \gset
:ddl;
SELECT pg_sleep(0.4);
SELECT clock_timestamp() AS before_claim \gset
CREATE TEMP TABLE c ON COMMIT DROP AS SELECT * FROM outbox.claim_batch(:'q', 10, interval '10 seconds');

SELECT set_eq('SELECT id FROM c', format('VALUES (%s::bigint), (%s), (%s)', (:'r'::bigint[])[1], (:'r'::bigint[])[2], (:'r'::bigint[])[3]),
              'a lease and a backoff that ended after the transaction began are over for the claim');
SELECT is((SELECT count(*) FROM c WHERE leased_until >= :'before_claim'::timestamptz + interval '10 seconds'), 3::bigint,
          'every lease ends a whole lease after the claim, not after the transaction''s start');
SELECT is((SELECT count(DISTINCT leased_until) FROM c), 1::bigint, 'the rows of one claim share one lease end');
SELECT is_empty(format('SELECT * FROM outbox.claim_batch(%L, 10)', :'q'), 'the new leases are not over yet: a second claim finds nothing');

SELECT * FROM finish();
ROLLBACK;
