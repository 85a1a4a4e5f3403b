-- A row sent after failed attempts keeps its attempt_count (how many failed) but not its last_error:
-- a delivered row showing an old error read as a failure (issue 32). Both claim modes record
-- through the same core (outbox._record): lease mode here, settle_locked below.
BEGIN;
SELECT plan(3);

SELECT test_helpers.new_queue(backoff_min => '1 millisecond', backoff_max => '1 millisecond') AS q \gset
SELECT test_helpers.add(:'q', 1) AS ids \gset
SELECT lease_token AS t1 FROM outbox.claim_batch(:'q') \gset
SELECT outbox.apply_result(:'q', (:'ids'::bigint[])[1], :'t1', 'transient', 'peer answered 503') AS _ \gset
SELECT pg_sleep(0.01);
SELECT lease_token AS t2 FROM outbox.claim_batch(:'q') \gset
SELECT ok(outbox.apply_result(:'q', (:'ids'::bigint[])[1], :'t2', 'sent'), 'the retry is sent');
SELECT results_eq(format('SELECT attempt_count, last_error, sent_at IS NOT NULL FROM %s', :'q'),
                  $$VALUES (1, NULL::text, true)$$,
                  'sent: the failed attempt is counted, its error cleared');

SELECT test_helpers.new_queue(backoff_min => '1 millisecond', backoff_max => '1 millisecond') AS l \gset
SELECT test_helpers.add(:'l', 1) AS lids \gset
SELECT outbox.settle_locked(:'l', ARRAY(SELECT id FROM outbox.claim_locked(:'l', 1)), '{transient}', '{"peer answered 503"}') AS _ \gset
SELECT pg_sleep(0.01);
SELECT outbox.settle_locked(:'l', ARRAY(SELECT id FROM outbox.claim_locked(:'l', 1)), '{sent}') AS _ \gset
SELECT results_eq(format('SELECT attempt_count, last_error, sent_at IS NOT NULL FROM %s', :'l'),
                  $$VALUES (1, NULL::text, true)$$,
                  'lock mode too');

SELECT * FROM finish();
ROLLBACK;
