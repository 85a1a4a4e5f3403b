-- A token that does not match (foreign, from before a release, on an unleased row) records
-- nothing: apply_result returns false and the whole row is byte-for-byte unchanged.
BEGIN;
SELECT plan(10);

SELECT test_helpers.new_queue('k', max_attempts => 3) AS q \gset
SELECT test_helpers.add(:'q', 1, 'a') AS a \gset
SELECT (:'a'::bigint[])[1] AS id \gset
SELECT lease_token AS t FROM outbox.claim_batch(:'q') \gset
-- Give the row some history so that every column has a value to protect.
SELECT format($$UPDATE %s SET attempt_count = 1, next_attempt_at = now() - interval '1 minute', last_error = 'earlier' WHERE id = %s$$,
              :'q', :id) AS ddl \gset
:ddl;
SELECT test_helpers.row_json(:'q', :id) AS before \gset
SELECT test_helpers.state(:'q') AS before_state \gset

SELECT is(outbox.apply_result(:'q', :id, gen_random_uuid(), 'sent'), false, 'a foreign token''s ''sent'' is refused');
SELECT is(outbox.apply_result(:'q', :id, gen_random_uuid(), 'transient', 'x'), false, 'a foreign token''s ''transient'' is refused');
SELECT is(outbox.apply_result(:'q', :id, gen_random_uuid(), 'permanent', 'x'), false, 'a foreign token''s ''permanent'' is refused');
SELECT is(test_helpers.row_json(:'q', :id), :'before'::jsonb,
          'the whole row is unchanged: leased_until, lease_token, attempt_count, next_attempt_at, last_error');
SELECT is(test_helpers.state(:'q'), :'before_state'::jsonb, 'the partition head is unchanged too');
SELECT is(outbox.apply_result(:'q', 999999999, :'t', 'sent'), false, 'an id that does not exist is refused');

SELECT ok(outbox.release(:'q', :id, :'t'), 'the holder releases the row');
SELECT test_helpers.row_json(:'q', :id) AS released \gset
SELECT is(outbox.apply_result(:'q', :id, :'t', 'sent'), false, 'a released token can not record a result');
SELECT is(test_helpers.row_json(:'q', :id), :'released'::jsonb, 'the released row is unchanged by it');
SELECT is(outbox.apply_result(:'q', :id, :'t', 'permanent'), false,
          'an unleased row (token NULL) refuses every token');

SELECT * FROM finish();
ROLLBACK;
