-- Claim runs keep an estimate of rows per head for a second (pgdrain.run_rows_<queue_id>): its time
-- is written as numeric, not as a double whose text follows the caller's extra_float_digits (at
-- -15 a time in 2033: an estimate never renewed).
BEGIN;
SELECT plan(1);

SELECT test_helpers.new_queue('k') AS q \gset
SELECT queue_id AS qid FROM outbox.queues WHERE queue = :'q' \gset
SELECT test_helpers.add(:'q', 3, 'k' || g) FROM generate_series(1, 10) g;

SET LOCAL extra_float_digits = -15;
SELECT count(*) FROM outbox.claim_runs(:'q', 6, run_length => 3);
SELECT ok(abs(split_part(current_setting('pgdrain.run_rows_' || :qid), ',', 2)::numeric
              - extract(epoch from clock_timestamp())) < 60,
          'the estimate''s time is the clock''s, whatever extra_float_digits says');

SELECT * FROM finish();
ROLLBACK;
