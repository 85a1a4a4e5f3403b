-- A worker's retry_at (a peer's Retry-After) is bounded by the queue's max_delay (issue 30, item 2):
-- apply_result, apply_results and settle_locked refuse one beyond it with 22023 naming the argument
-- and its element, and change nothing (not even the rows of the batch that were fine); inside it
-- the row waits until then.
BEGIN;
SELECT plan(8);
SET LOCAL timezone = 'UTC';

SELECT test_helpers.fresh_name() AS q \gset
SELECT outbox.create_queue(:'q', max_delay => '1 hour');
SELECT test_helpers.add(:'q', 4) AS ids \gset
CREATE TEMP TABLE c ON COMMIT DROP AS SELECT * FROM outbox.claim_batch(:'q', 2);
SELECT array_agg(id ORDER BY id) AS cids, array_agg(lease_token ORDER BY id) AS tokens FROM c \gset
SELECT test_helpers.state(:'q') AS before \gset

SELECT throws_ok(format($$SELECT outbox.apply_result(%L, %s, %L, 'transient', '503', '290000-01-01 00:00:00+00')$$,
                        :'q', (:'cids'::bigint[])[1], (:'tokens'::uuid[])[1]), '22023',
  'apply_result: retry_at must be at most the queue''s max_delay (01:00:00) from now, got 290000-01-01 00:00:00+00',
  'apply_result refuses a retry_at beyond max_delay');
SELECT throws_ok(format($$SELECT * FROM outbox.apply_results(%L, %L, %L, '{transient,transient}', NULL,
                                                            ARRAY[clock_timestamp() + interval '1 minute', clock_timestamp() + interval '2 hours'])$$,
                        :'q', :'cids', :'tokens'), '22023', NULL,
  'apply_results refuses the batch when one retry_at is beyond it');
SELECT is(test_helpers.state(:'q'), :'before', 'the refused calls changed nothing');

SELECT is((SELECT count(*) FROM outbox.apply_results(:'q', :'cids', :'tokens', '{transient,transient}', NULL,
                                                     ARRAY[clock_timestamp() + interval '59 minutes', NULL]) WHERE applied),
          2::bigint, 'a retry_at inside max_delay is recorded');
SELECT ok((test_helpers.row_json(:'q', (:'cids'::bigint[])[1])->>'next_attempt_at')::timestamptz > clock_timestamp() + interval '58 minutes',
          '... as the row''s next attempt');

-- Lock mode.
CREATE TEMP TABLE l ON COMMIT DROP AS SELECT * FROM outbox.claim_locked(:'q', 1);
SELECT id AS lid FROM l \gset
SELECT test_helpers.state(:'q') AS before \gset
SELECT throws_ok(format($$SELECT outbox.settle_locked(%L, ARRAY[%s]::bigint[], '{transient}', NULL, ARRAY['290000-01-01 00:00:00+00']::timestamptz[])$$,
                        :'q', :lid), '22023',
  'settle_locked: retry_at must be at most the queue''s max_delay (01:00:00) from now, got 290000-01-01 00:00:00+00 (element 1)',
  'settle_locked refuses it too');
SELECT is(test_helpers.state(:'q'), :'before', 'and changed nothing');
SELECT is(outbox.settle_locked(:'q', ARRAY[:lid]::bigint[], '{transient}', NULL, ARRAY[clock_timestamp() + interval '10 minutes']),
          1::bigint, 'settle_locked records a retry_at inside it');

SELECT * FROM finish();
ROLLBACK;
