-- A transient result may say when to try again (a peer's Retry-After): apply_result, apply_results
-- and settle_locked take retry_at, fenced like every result; a time already past means now, and
-- only a transient outcome takes one (a refused call changes nothing).
BEGIN;
SELECT plan(8);

SELECT test_helpers.new_queue(max_attempts => 5, backoff_min => '1 second', backoff_max => '2 seconds') AS q \gset
SELECT test_helpers.add(:'q', 4) AS ids \gset
CREATE TEMP TABLE c ON COMMIT DROP AS SELECT * FROM outbox.claim_batch(:'q', 10);
SELECT id AS r1, lease_token AS t1 FROM c ORDER BY id LIMIT 1 \gset
CREATE FUNCTION pg_temp.wait_of(q text, row_id bigint) RETURNS interval LANGUAGE plpgsql AS $$
DECLARE v interval;
BEGIN
  EXECUTE format('SELECT next_attempt_at - clock_timestamp() FROM %s WHERE id = $1', q) INTO v USING row_id;
  RETURN v;
END $$;

SELECT ok(outbox.apply_result(:'q', :r1, :'t1', 'transient', 'busy', clock_timestamp() + interval '1 hour'),
          'apply_result records a transient with retry_at');
SELECT ok(pg_temp.wait_of(:'q', :r1) BETWEEN interval '59 minutes' AND interval '60 minutes',
          'the row''s next attempt is the time the caller chose, not the queue''s 1-2 s backoff');
SELECT ok(NOT outbox.apply_result(:'q', :r1, :'t1', 'transient', 'busy', clock_timestamp() + interval '2 hours'),
          'a retry_at with a token no longer ours is refused like any result');
SELECT ok(pg_temp.wait_of(:'q', :r1) BETWEEN interval '59 minutes' AND interval '60 minutes', 'and changed nothing');

SELECT array_agg(id ORDER BY id) AS rest, array_agg(lease_token ORDER BY id) AS tokens FROM c WHERE id <> :r1 \gset
SELECT test_helpers.state(:'q') AS before \gset
SELECT throws_ok(format($$SELECT * FROM outbox.apply_results(%L, %L, %L, '{sent,transient,transient}', NULL, ARRAY[clock_timestamp(), NULL, NULL])$$,
                        :'q', :'rest', :'tokens'), '22023',
  'apply_results: retry_at must be NULL unless the outcome is ''transient'' (element 1)', 'a sent row takes no retry_at');
SELECT is(test_helpers.state(:'q'), :'before', 'the refused call changed nothing');
SELECT is((SELECT count(*) FROM outbox.apply_results(:'q', :'rest', :'tokens', '{sent,transient,transient}', NULL,
                                                     ARRAY[NULL, clock_timestamp() - interval '1 day', NULL]) WHERE applied),
          3::bigint, 'apply_results takes one retry_at per row');
SELECT ok(pg_temp.wait_of(:'q', (:'rest'::bigint[])[2]) <= interval '0', 'a retry_at in the past means: due now');

SELECT * FROM finish();
ROLLBACK;
