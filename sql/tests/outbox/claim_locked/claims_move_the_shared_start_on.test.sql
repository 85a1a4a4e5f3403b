-- Every claim that searched past the queue's shared start (outbox.claim_start_q<id>) leaves where it
-- stopped there, in lock mode as in lease mode, so that a session without a cursor of its own (a
-- pooled connection that has not claimed the queue for a second) starts past the heads the queue's
-- claims have just taken, not where the once-a-second search from the front stopped: before, lock
-- mode left the start to that search, and such a claim walked every head the drain had moved since
-- (3-6x the static claim's buffers sampled during 4-replica drains, make bench section 6d).
BEGIN;
SELECT plan(4);

SELECT test_helpers.new_queue('k') AS q \gset
SELECT queue_id AS qid FROM outbox.queues WHERE queue = :'q' \gset
SELECT test_helpers.add(:'q', 1, 'a') AS a1 \gset
SELECT test_helpers.add(:'q', 1, 'b') AS b1 \gset
SELECT test_helpers.add(:'q', 1, 'c') AS c1 \gset
SELECT test_helpers.add(:'q', 1, 'd') AS d1 \gset

-- A session whose cursor (under a second old) stands before a: its claims search past it.
SELECT setval(('outbox.claim_start_q' || :qid)::regclass, 1);
SELECT set_config('pgdrain.claim_cursor_' || :qid,
                  ((:'a1'::bigint[])[1] - 1) || ',' || extract(epoch from clock_timestamp()), false);
SELECT is((SELECT array_agg(id ORDER BY id) FROM outbox.claim_locked(:'q', 2)), :'a1'::bigint[] || :'b1'::bigint[],
          'a lock-mode claim takes the heads past its cursor');
SELECT is(pg_sequence_last_value(('outbox.claim_start_q' || :qid)::regclass), (:'b1'::bigint[])[1],
          'and leaves where it stopped as the queue''s shared start');

SELECT set_config('pgdrain.claim_cursor_' || :qid,
                  (:'b1'::bigint[])[1] || ',' || extract(epoch from clock_timestamp()), false);
SELECT is((SELECT array_agg(id ORDER BY id) FROM outbox.claim_batch(:'q', 2)), :'c1'::bigint[] || :'d1'::bigint[],
          'a lease-mode claim takes the heads past its cursor');
SELECT is(pg_sequence_last_value(('outbox.claim_start_q' || :qid)::regclass), (:'d1'::bigint[])[1],
          'and moves the shared start on as well');

SELECT * FROM finish();
ROLLBACK;
