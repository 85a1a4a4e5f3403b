-- An expired lease makes the row claimable again with a NEW token; the old token's result,
-- extension and release are all refused and leave the row byte-for-byte unchanged.
BEGIN;
SELECT plan(16);

SELECT test_helpers.new_queue() AS q \gset
SELECT test_helpers.add(:'q', 1) AS r \gset
SELECT (:'r'::bigint[])[1] AS id \gset

SELECT lease_token AS t1 FROM outbox.claim_batch(:'q', 10) \gset
SELECT is_empty(format('SELECT * FROM outbox.claim_batch(%L, 10)', :'q'), 'a live lease is not claimed again');
SELECT is(test_helpers.expire_leases(:'q'), 1::bigint, 'the lease expires');
SELECT lease_token AS t2, attempt_count AS a2 FROM outbox.claim_batch(:'q', 10) \gset
SELECT isnt(:'t2'::uuid, :'t1'::uuid, 'the expired row is claimed again with a new token');
SELECT is(:a2, 0, 'an expired lease counts no attempt');

SELECT test_helpers.row_json(:'q', :id) AS before \gset
SELECT is(outbox.apply_result(:'q', :id, :'t1', 'sent'), false, 'the old token''s ''sent'' is refused');
SELECT is(test_helpers.row_json(:'q', :id), :'before'::jsonb, 'after the refused ''sent'' the whole row is unchanged');
SELECT is(outbox.apply_result(:'q', :id, :'t1', 'transient', 'late'), false, 'the old token''s ''transient'' is refused');
SELECT is(outbox.apply_result(:'q', :id, :'t1', 'permanent', 'late'), false, 'the old token''s ''permanent'' is refused');
SELECT is(outbox.extend_lease(:'q', :id, :'t1', '1 hour'), NULL, 'the old token can not extend the lease');
SELECT is(outbox.release(:'q', :id, :'t1'), false, 'the old token can not release the row');
SELECT is(test_helpers.row_json(:'q', :id), :'before'::jsonb,
          'after every refused call the whole row (lease, token, attempt_count, next_attempt_at) is unchanged');
SELECT is(outbox.apply_result(:'q', :id, :'t2', 'sent'), true, 'the new token''s result is recorded');

-- The same on a partitioned queue, where the head must be re-claimable too.
SELECT test_helpers.new_queue('k') AS p \gset
SELECT test_helpers.add(:'p', 2, 'a') AS pr \gset
SELECT (:'pr'::bigint[])[1] AS pid \gset
SELECT lease_token AS pt1 FROM outbox.claim_batch(:'p', 10) \gset
SELECT test_helpers.expire_leases(:'p') AS _ \gset
SELECT results_eq(format('SELECT id FROM outbox.claim_batch(%L, 10)', :'p'), format('VALUES (%s::bigint)', :pid),
                  'on a partitioned queue the expired head (not its successor) is claimed again');
SELECT test_helpers.row_json(:'p', :pid) AS pbefore \gset
SELECT isnt((:'pbefore'::jsonb ->> 'lease_token')::uuid, :'pt1'::uuid, 'with a new token');
SELECT is(outbox.apply_result(:'p', :pid, :'pt1', 'sent'), false, 'the old token''s result is refused');
SELECT is(test_helpers.row_json(:'p', :pid), :'pbefore'::jsonb, 'and the partitioned row is unchanged');

SELECT * FROM finish();
ROLLBACK;
