-- In lock mode the claiming transaction stays open for the whole delivery: a 'transient' settled
-- at its end backs off from the clock at the settle, not from now() (the transaction's start), so
-- the backoff is never over before it is written.
BEGIN;
SELECT plan(3);

SELECT test_helpers.new_queue(backoff_min => '10 seconds', backoff_max => '10 seconds') AS q \gset
SELECT test_helpers.new_queue('k', backoff_min => '10 seconds', backoff_max => '10 seconds') AS p \gset
SELECT test_helpers.add(:'q', 1) AS r \gset
SELECT test_helpers.add(:'p', 1, 'a') AS pr \gset
CREATE TEMP TABLE l ON COMMIT DROP AS
  SELECT :'q' AS q, id FROM outbox.claim_locked(:'q') UNION ALL SELECT :'p', id FROM outbox.claim_locked(:'p');
SELECT pg_sleep(0.4);  -- the delivery
SELECT clock_timestamp() AS before_settle \gset
SELECT outbox.settle_locked(:'q', :'r', '{transient}') AS _ \gset
SELECT outbox.settle_locked(:'p', :'pr', '{transient}') AS _ \gset

SELECT ok((test_helpers.row_json(:'q', (:'r'::bigint[])[1]) ->> 'next_attempt_at')::timestamptz
            >= :'before_settle'::timestamptz + interval '10 seconds',
          'the retry waits a whole backoff after the settle, not after the transaction''s start');
SELECT ok((test_helpers.row_json(:'p', (:'pr'::bigint[])[1]) ->> 'next_attempt_at')::timestamptz
            >= :'before_settle'::timestamptz + interval '10 seconds',
          'on a partitioned queue too');
SELECT is_empty(format('SELECT * FROM outbox.claim_batch(%L, 10)', :'q'), 'the row is not claimable again at once');

SELECT * FROM finish();
ROLLBACK;
