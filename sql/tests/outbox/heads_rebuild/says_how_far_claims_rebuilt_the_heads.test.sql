-- outbox.heads_rebuild tells callers who may not read the unlogged tables (pgdrain check, the
-- drainer's gauges, the console) whether claims are rebuilding a queue's heads after a crash, and
-- the last key a part has done: meanwhile outbox.repair checks nothing, and a key no part has
-- reached waits for its part.
BEGIN;
SELECT plan(10);

SELECT test_helpers.new_queue('k') AS q \gset
SELECT queue_id AS qid FROM outbox.queues WHERE queue = :'q' \gset
INSERT INTO :q (event_type, payload, k)
SELECT 'e', '{}', 'k' || pg_catalog.lpad(g::text, 5, '0') FROM generate_series(1, 3000) g;
SET CONSTRAINTS outbox.pgdrain_commit IMMEDIATE;
SET CONSTRAINTS outbox.pgdrain_commit DEFERRED;

SELECT is((SELECT row(rebuilding, rebuilt_through)::text FROM outbox.heads_rebuild(:'q')), '(f,)',
          'a queue whose heads are complete is not being rebuilt');

-- The crash: PostgreSQL empties the unlogged tables.
DELETE FROM outbox.partition_heads WHERE queue_id = :qid;
DELETE FROM outbox.partition_heads_built WHERE queue_id = :qid;
SELECT is((SELECT row(rebuilding, rebuilt_through)::text FROM outbox.heads_rebuild(:'q')), '(t,)',
          'after a crash: being rebuilt, no part done yet');
SELECT is_empty(format('SELECT * FROM outbox.repair(%L, true)', :'q'),
                'and repair checks nothing meanwhile (what heads_rebuild is there to say)');

-- A part done through k01000 (outbox._restore_heads notes it so; a real part's size depends on
-- the clock: rebuilds_heads_after_a_crash_in_parts).
INSERT INTO outbox.partition_heads_restored (queue_id, after_key) VALUES (:qid, 'k01000');
SELECT is((SELECT row(rebuilding, rebuilt_through)::text FROM outbox.heads_rebuild(:'q')), '(t,k01000)',
          'after a part: still being rebuilt, through the last key it did');

-- Claims make the remaining parts; the last one marks the heads built.
SELECT count(*) AS parts FROM (SELECT outbox._restore_heads(q) FROM outbox.queues q, generate_series(1, 20)
                               WHERE q.queue_id = :qid) s \gset
SELECT is((SELECT row(rebuilding, rebuilt_through)::text FROM outbox.heads_rebuild(:'q')), '(f,)',
          'once the last part is done: not being rebuilt');

SELECT test_helpers.new_queue() AS plain \gset
SELECT is((SELECT row(rebuilding, rebuilt_through)::text FROM outbox.heads_rebuild(:'plain')), '(f,)',
          'an unpartitioned queue keeps no heads: never being rebuilt');

SELECT throws_ok($$SELECT * FROM outbox.heads_rebuild('public.no_such_queue')$$, '42P01',
                 'heads_rebuild: queue public.no_such_queue is not registered (call outbox.create_queue first)',
                 'an unregistered queue is refused, naming it');

SELECT ok(has_function_privilege('pgdrain_operator', 'outbox.heads_rebuild(text)', 'EXECUTE')
          AND has_function_privilege('pgdrain_reader', 'outbox.heads_rebuild(text)', 'EXECUTE')
          AND has_function_privilege('pgdrain_worker', 'outbox.heads_rebuild(text)', 'EXECUTE'),
          'operators, readers and workers may ask');
SELECT ok(NOT has_function_privilege('pgdrain_producer', 'outbox.heads_rebuild(text)', 'EXECUTE'),
          'producers may not');
SELECT is_empty($$SELECT r, t FROM unnest(ARRAY['pgdrain_operator', 'pgdrain_reader', 'pgdrain_worker', 'pgdrain_producer']) r,
                                     unnest(ARRAY['outbox.partition_heads_restored', 'outbox.partition_heads_built']) t
                  WHERE has_table_privilege(r, t, 'SELECT')$$,
                'and no role needs the unlogged tables for it');

SELECT * FROM finish();
ROLLBACK;
