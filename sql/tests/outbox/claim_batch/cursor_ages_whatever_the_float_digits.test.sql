-- A claim remembers where its session stopped among fresh heads and when that run of claims began
-- (pgdrain.claim_cursor_<queue_id>), and uses it for a second at most, so that a head behind it (a
-- row given back, a lease that ran out) is found by a search from the front. The time is written
-- as numeric: as a double its text follows the caller's extra_float_digits, and at -15 it read
-- 2e+09 (a time in 2033), a cursor that never aged: the session's claims never searched from the
-- front again, and a head given back waited while new keys kept coming. The same for claim runs'
-- estimate of rows per head (pgdrain.run_rows_<queue_id>).
BEGIN;
SELECT plan(4);

SELECT test_helpers.new_queue('k') AS q \gset
SELECT queue_id AS qid FROM outbox.queues WHERE queue = :'q' \gset
SELECT array_agg((test_helpers.add(:'q', 1, 'k' || lpad(g::text, 2, '0')))[1] ORDER BY g) AS ids FROM generate_series(1, 30) g \gset

SET LOCAL extra_float_digits = -15;
SELECT id AS first, lease_token AS first_token FROM outbox.claim_batch(:'q', 1) \gset
SELECT is(:first::bigint, (:'ids'::bigint[])[1], 'the first claim takes the first key''s head');
SELECT count(*) FROM outbox.claim_batch(:'q', 4);
SELECT ok(abs(split_part(current_setting('pgdrain.claim_cursor_' || :qid), ',', 2)::numeric
              - extract(epoch from clock_timestamp())) < 60,
          'the cursor''s time is the clock''s, whatever extra_float_digits says');
SELECT ok(outbox.release(:'q', :first, :'first_token'), 'the first head is given back');

-- Over a second later the session's cursor is old: this claim (the queue's one search from the
-- front in that second) finds the head given back first.
SELECT pg_sleep(1.1);
SELECT is((SELECT min(id) FROM outbox.claim_batch(:'q', 4)), :first::bigint,
          'a second later a claim searches from the front and takes the head given back');

SELECT * FROM finish();
ROLLBACK;
