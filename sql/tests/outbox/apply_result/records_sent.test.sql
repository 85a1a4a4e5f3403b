-- 'sent' marks the row sent now, clears lease and token together, counts no attempt; the same
-- token can not record a second result.
BEGIN;
SELECT plan(6);

SELECT test_helpers.new_queue('k') AS q \gset
SELECT test_helpers.add(:'q', 2, 'a') AS a \gset
SELECT (:'a'::bigint[])[1] AS id \gset
SELECT lease_token AS t FROM outbox.claim_batch(:'q') \gset
SELECT test_helpers.row_json(:'q', :id) AS before \gset

SELECT is(outbox.apply_result(:'q', :id, :'t', 'sent'), true, 'apply_result records ''sent'' for the lease holder');
SELECT is(test_helpers.row_json(:'q', :id),
          :'before'::jsonb || jsonb_build_object('sent_at', now(), 'lease_token', NULL, 'leased_until', NULL),
          'the row gets sent_at = now(), lease and token cleared, and nothing else changes');
SELECT test_helpers.row_json(:'q', :id) AS after \gset
SELECT is(outbox.apply_result(:'q', :id, :'t', 'sent'), false, 'the same token can not record twice');
SELECT is(outbox.apply_result(:'q', :id, :'t', 'transient'), false, 'nor turn a sent row into a failure');
SELECT is(test_helpers.row_json(:'q', :id), :'after'::jsonb, 'the sent row is unchanged by the refused calls');
SELECT results_eq(format('SELECT id FROM outbox.claim_batch(%L)', :'q'), format('VALUES (%s::bigint)', (:'a'::bigint[])[2]),
                  'a sent row is never claimed again and its successor becomes the head');

SELECT * FROM finish();
ROLLBACK;
