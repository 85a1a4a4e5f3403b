-- A failure's error is kept to its first 4000 characters (00038): a client that passes a peer's
-- whole error page (megabytes) would have every reader of the row (stats, the console, the CLI)
-- read it back. Lease mode and lock mode record through the same core.
BEGIN;
SELECT plan(3);

SELECT test_helpers.new_queue(backoff_min => '1 millisecond', backoff_max => '1 millisecond') AS q \gset
SELECT test_helpers.add(:'q', 1) AS ids \gset
SELECT lease_token AS t1 FROM outbox.claim_batch(:'q') \gset
SELECT ok(outbox.apply_result(:'q', (:'ids'::bigint[])[1], :'t1', 'transient', 'é' || repeat('x', 100000)),
          'a transient failure with a 100,001-character error is recorded');
SELECT results_eq(format('SELECT length(last_error), left(last_error, 2) FROM %s', :'q'),
                  $$VALUES (4000, 'éx'::text)$$,
                  'its first 4000 characters are kept');

SELECT test_helpers.new_queue() AS l \gset
SELECT test_helpers.add(:'l', 1) AS lids \gset
SELECT outbox.settle_locked(:'l', ARRAY(SELECT id FROM outbox.claim_locked(:'l', 1)), '{permanent}',
                            ARRAY[repeat('y', 5000)]) AS _ \gset
SELECT results_eq(format('SELECT length(last_error) FROM %s', :'l'), $$VALUES (4000)$$,
                  'lock mode too');

SELECT * FROM finish();
ROLLBACK;
