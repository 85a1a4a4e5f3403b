-- A partitioned queue has two shared claim hints (UNLOGGED sequences, outbox._install_claim_hints):
-- when a claim last searched its ready heads from the front, and where that search stopped. A claim
-- without a cursor of its own starts at that place while the search is under a second old; the
-- place is a hint only: a wrong one (past every head, or not set) costs a search from the front in
-- the same call, never a row. drop_queue drops both; an unpartitioned queue has none.
BEGIN;
SELECT plan(13);

SELECT test_helpers.new_queue('k') AS q \gset
SELECT queue_id AS qid FROM outbox.queues WHERE queue = :'q' \gset
SELECT isnt(to_regclass('outbox.claim_front_q' || :qid), NULL, 'create_queue makes the queue''s front-search clock');
SELECT isnt(to_regclass('outbox.claim_start_q' || :qid), NULL, 'create_queue makes the queue''s shared start');
SELECT is((SELECT relpersistence FROM pg_class WHERE oid = to_regclass('outbox.claim_start_q' || :qid)), 'u'::"char",
          'the hints are unlogged');

SELECT test_helpers.add(:'q', 1, 'a') AS a1 \gset
SELECT test_helpers.add(:'q', 1, 'b') AS b1 \gset
SELECT test_helpers.add(:'q', 1, 'c') AS c1 \gset

-- Somebody searched from the front a moment ago and stopped past every head: a claim without a
-- cursor starts there, finds nothing past it, and goes on from the front in the same call.
SELECT setval(('outbox.claim_front_q' || :qid)::regclass, (extract(epoch from clock_timestamp()) * 1000)::bigint);
SELECT setval(('outbox.claim_start_q' || :qid)::regclass, 1000000000);
SELECT set_config('pgdrain.claim_cursor_' || :qid, '', false);
SELECT is((SELECT array_agg(id ORDER BY id) FROM outbox.claim_batch(:'q', 2)), (:'a1'::bigint[] || :'b1'::bigint[]),
          'a shared start past every head costs a search from the front, not a row');

-- The last search from the front is over a second old: this claim searches from the front itself,
-- takes the clock, and leaves where it stopped as the shared start.
SELECT setval(('outbox.claim_front_q' || :qid)::regclass, 1);
SELECT set_config('pgdrain.claim_cursor_' || :qid, '', false);
SELECT is((SELECT array_agg(id) FROM outbox.claim_batch(:'q', 5)), :'c1'::bigint[],
          'the claim that finds the search a second old searches from the front');
SELECT cmp_ok(pg_sequence_last_value(('outbox.claim_front_q' || :qid)::regclass),
              '>', (extract(epoch from clock_timestamp()) * 1000)::bigint - 60000,
              'and notes the time of its search');
SELECT is(pg_sequence_last_value(('outbox.claim_start_q' || :qid)::regclass), (:'c1'::bigint[])[1],
          'and where it stopped');

-- Crash recovery resets unlogged sequences (never called: no last value). A claim then searches from
-- the front and sets both again.
SELECT test_helpers.add(:'q', 1, 'd') AS d1 \gset
SELECT setval(('outbox.claim_front_q' || :qid)::regclass, 1, false);
SELECT setval(('outbox.claim_start_q' || :qid)::regclass, 1, false);
SELECT set_config('pgdrain.claim_cursor_' || :qid, '', false);
SELECT is((SELECT array_agg(id) FROM outbox.claim_batch(:'q', 5)), :'d1'::bigint[],
          'hints reset as by crash recovery cost a search from the front, not a row');
SELECT is(pg_sequence_last_value(('outbox.claim_start_q' || :qid)::regclass), (:'d1'::bigint[])[1],
          'and that search sets the shared start again');

-- Registering the queue again keeps its hints (and their values).
SELECT outbox.create_queue(:'q', 'k');
SELECT is(pg_sequence_last_value(('outbox.claim_start_q' || :qid)::regclass), (:'d1'::bigint[])[1],
          'create_queue again keeps the hints');

SELECT test_helpers.new_queue() AS u \gset
SELECT is((SELECT count(*)::int FROM pg_class WHERE relkind = 'S' AND relnamespace = 'outbox'::regnamespace
             AND relname ~ ('^claim_(front|start)_q' || (SELECT queue_id FROM outbox.queues WHERE queue = :'u') || '$')),
          0, 'an unpartitioned queue has no claim hints');

SELECT outbox.drop_queue(:'q');
SELECT is(to_regclass('outbox.claim_front_q' || :qid), NULL, 'drop_queue drops the front-search clock');
SELECT is(to_regclass('outbox.claim_start_q' || :qid), NULL, 'drop_queue drops the shared start');

SELECT * FROM finish();
ROLLBACK;
