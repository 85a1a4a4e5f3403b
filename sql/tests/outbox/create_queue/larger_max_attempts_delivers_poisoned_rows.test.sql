-- create_queue run again with a larger max_attempts makes rows that were poisoned under the old
-- limit deliverable again: they are claimed, in id order within their key, although the key's
-- floor had been raised past them and a key with nothing else pending had lost its head.
BEGIN;
SELECT plan(3);

SELECT test_helpers.new_queue('k', max_attempts => 2) AS q \gset
SELECT test_helpers.add(:'q', 2, 'a') AS a \gset
SELECT test_helpers.add(:'q', 1, 'b') AS b \gset
CREATE TEMP TABLE c ON COMMIT DROP AS SELECT * FROM outbox.claim_batch(:'q', 10);
SELECT count(*) AS _ FROM c WHERE outbox.apply_result(:'q', id, lease_token, 'permanent', 'bad') \gset
-- a's successor is the head now (its floor past the poisoned row), b has no head at all.
SELECT results_eq(format('SELECT partition_key, id FROM outbox.claim_batch(%L, 10)', :'q'),
  format('VALUES (%L::text, %s::bigint)', 'a', (:'a'::bigint[])[2]), 'with max_attempts 2 the poisoned heads are skipped');
SELECT test_helpers.expire_leases(:'q') AS _ \gset

SELECT outbox.create_queue(:'q', 'k', max_attempts => 5);
SELECT results_eq(format('SELECT partition_key, id, attempt_count FROM outbox.claim_batch(%L, 10) ORDER BY 1', :'q'),
  format('VALUES (%L::text, %s::bigint, 2), (%L, %s, 2)', 'a', (:'a'::bigint[])[1], 'b', (:'b'::bigint[])[1]),
  'after max_attempts 5 the formerly poisoned rows are their keys'' heads again');
SELECT is_empty(format('SELECT * FROM outbox.repair(%L, true)', :'q'), 'nothing is left for the repair pass');

SELECT * FROM finish();
ROLLBACK;
