-- A claim's cursor (pgdrain.claim_cursor_<queue_id>: where its session stopped among fresh heads,
-- and when that run of claims began) is used for a second at most, so that a head behind it (a row
-- given back, a lease that ran out) is found by a search from the front. A run that began after
-- the clock's now was recorded by a clock since set back: taken as younger than a second, it never
-- aged until the clock caught up (an hour back: an hour), and a head given back waited behind every
-- cursor while new keys kept coming. It counts as old, as the queue's shared search hint
-- (claim_front_q<queue_id>) already does with a time ahead of the clock.
BEGIN;
SELECT plan(4);

SELECT test_helpers.new_queue('k') AS q \gset
SELECT queue_id AS qid FROM outbox.queues WHERE queue = :'q' \gset
SELECT array_agg((test_helpers.add(:'q', 1, 'k' || lpad(g::text, 2, '0')))[1] ORDER BY g) AS ids FROM generate_series(1, 30) g \gset

SELECT id AS first, lease_token AS first_token FROM outbox.claim_batch(:'q', 1) \gset
SELECT is(:first::bigint, (:'ids'::bigint[])[1], 'the first claim takes the first key''s head');
SELECT count(*) FROM outbox.claim_batch(:'q', 4);
SELECT ok(outbox.release(:'q', :first, :'first_token'), 'the first head is given back');

-- The clock is set back an hour: the session's run now began an hour "from now".
SELECT set_config('pgdrain.claim_cursor_' || :qid,
                  split_part(current_setting('pgdrain.claim_cursor_' || :qid), ',', 1) || ','
                  || (extract(epoch FROM clock_timestamp()) + 3600)::numeric, false) IS NOT NULL AS moved;
SELECT ok(split_part(current_setting('pgdrain.claim_cursor_' || :qid), ',', 2)::numeric
          > extract(epoch FROM clock_timestamp()) + 3000, 'the cursor''s run began after the clock''s now');

-- A second later the cursor is old whatever the clock did: the claim searches from the front.
SELECT pg_sleep(1.1);
SELECT is((SELECT min(id) FROM outbox.claim_batch(:'q', 4)), :first::bigint,
          'a second later a claim searches from the front and takes the head given back');

SELECT * FROM finish();
ROLLBACK;
