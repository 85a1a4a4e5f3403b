-- claim_locked_runs locks each partition's head and the rows after it in the caller's transaction;
-- settle_locked records what was applied (a run up to its first failure) and the rest stays
-- untouched, claimed again after the failed row.
BEGIN;
SELECT plan(6);

SELECT test_helpers.new_queue('k') AS q \gset
SELECT test_helpers.add(:'q', 4, 'a') AS a, test_helpers.add(:'q', 1, 'b') AS b \gset
SELECT test_helpers.row_json(:'q', (:'a'::bigint[])[4]) AS a4_before \gset

SELECT results_eq(format('SELECT id FROM outbox.claim_locked_runs(%L, 10, 3)', :'q'),
  format('VALUES (%s::bigint), (%s), (%s), (%s)', (:'a'::bigint[])[1], (:'a'::bigint[])[2], (:'a'::bigint[])[3],
         (:'b'::bigint[])[1]),
  'a''s head with the two rows after it, and b''s head, in id order');
SELECT is(test_helpers.ids_where(:'q', 'lease_token IS NOT NULL'), '{}'::bigint[], 'no lease is written');
SELECT is_empty(format('SELECT * FROM outbox.claim_locked_runs(%L, 10, 3)', :'q'),
  'a second claim in the same transaction takes none of the rows it holds');

-- a1 sent, a2 failed, a3 not applied (the run stopped), b1 sent.
SELECT is(outbox.settle_locked(:'q', ARRAY[(:'a'::bigint[])[1], (:'a'::bigint[])[2], (:'b'::bigint[])[1]],
                               ARRAY['sent', 'transient', 'sent'], ARRAY[NULL, 'peer down', NULL]),
          3::bigint, 'the applied rows are settled');
SELECT is(test_helpers.ids_where(:'q', 'sent_at IS NULL AND attempt_count = 0'),
          ARRAY[(:'a'::bigint[])[3], (:'a'::bigint[])[4]], 'the rows after the failure are untouched');
SELECT is(test_helpers.row_json(:'q', (:'a'::bigint[])[4]), :'a4_before'::jsonb, 'byte for byte');

SELECT * FROM finish();
ROLLBACK;
