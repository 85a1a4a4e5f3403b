-- A head that failed transiently blocks its own partition while it backs off (its successors
-- wait: per-key order), but never other partitions; when its backoff ends it is retried first.
BEGIN;
SELECT plan(7);

SELECT test_helpers.new_queue('k') AS q \gset
SELECT test_helpers.add(:'q', 2, 'a') AS a \gset
SELECT test_helpers.add(:'q', 2, 'b') AS b \gset

CREATE TEMP TABLE b1 ON COMMIT DROP AS SELECT * FROM outbox.claim_batch(:'q', 10);
SELECT ok(outbox.apply_result(:'q', id, lease_token, 'transient', '503'), 'partition a''s head fails transiently')
FROM b1 WHERE partition_key = 'a';
SELECT ok(outbox.apply_result(:'q', id, lease_token, 'sent'), 'partition b''s head is sent')
FROM b1 WHERE partition_key = 'b';

SELECT results_eq(format('SELECT id FROM outbox.claim_batch(%L, 10)', :'q'),
  format('VALUES (%s::bigint)', (:'b'::bigint[])[2]),
  'while a''s head backs off, a''s successor waits but partition b moves on');
SELECT is_empty(format('SELECT * FROM outbox.claim_batch(%L, 10)', :'q'),
                'nothing of partition a is claimable during the backoff');
SELECT is(test_helpers.row_json(:'q', (:'a'::bigint[])[2]) ->> 'lease_token', NULL,
          'the successor of the backing-off head was never leased');

SELECT test_helpers.end_backoff(:'q') AS _ \gset
SELECT results_eq(format('SELECT id, attempt_count FROM outbox.claim_batch(%L, 10)', :'q'),
  format('VALUES (%s::bigint, 1)', (:'a'::bigint[])[1]),
  'when the backoff ends the failed head itself is retried, not its successor');

-- In an unpartitioned queue a backing-off row blocks nobody.
SELECT test_helpers.new_queue() AS u \gset
SELECT test_helpers.add(:'u', 2) AS ur \gset
SELECT lease_token AS ut FROM outbox.claim_batch(:'u', 1) \gset
SELECT outbox.apply_result(:'u', (:'ur'::bigint[])[1], :'ut', 'transient') AS _ \gset
SELECT results_eq(format('SELECT id FROM outbox.claim_batch(%L, 10)', :'u'),
  format('VALUES (%s::bigint)', (:'ur'::bigint[])[2]),
  'in an unpartitioned queue the next row is claimable while the failed one backs off');

SELECT * FROM finish();
ROLLBACK;
