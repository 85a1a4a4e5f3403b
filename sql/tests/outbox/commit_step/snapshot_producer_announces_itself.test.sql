-- A REPEATABLE READ or SERIALIZABLE producer announces itself before it takes an id (pgdrain_snapshot,
-- BEFORE INSERT FOR EACH STATEMENT, only outside READ COMMITTED): a shared advisory lock on
-- (outbox._snapshot_lock_class(), queue_id), held until it ends. READ COMMITTED commit steps that
-- find it taken raise the clocks such a producer reads (outbox._snapshot_producers_open).
BEGIN ISOLATION LEVEL REPEATABLE READ;
SELECT plan(6);

SELECT test_helpers.new_queue('k') AS q \gset
SELECT queue_id AS qid FROM outbox.queues WHERE queue = :'q' \gset

-- tgtype bits: 1 = ROW, 2 = BEFORE, 4 = INSERT.
SELECT is((SELECT tgtype::int FROM pg_trigger WHERE tgrelid = :'q'::regclass AND tgname = 'pgdrain_snapshot'), 6,
          'pgdrain_snapshot is BEFORE INSERT FOR EACH STATEMENT');
SELECT is((SELECT encode(tgargs, 'escape') FROM pg_trigger WHERE tgrelid = :'q'::regclass AND tgname = 'pgdrain_snapshot'),
          format('%s\000%s\000', outbox._snapshot_lock_class(), :qid),
          'it carries the lock''s keys: the class and the queue_id');
SELECT ok((SELECT pg_get_triggerdef(oid) FROM pg_trigger WHERE tgrelid = :'q'::regclass AND tgname = 'pgdrain_snapshot')
          ~ 'WHEN \(\(current_setting\(''transaction_isolation''::text\) <> ''read committed''::text\)\)',
          'it fires only outside READ COMMITTED (a WHEN clause: no call in READ COMMITTED)');

SELECT is_empty(format($$SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid()
                         AND classid = %s::oid AND objid = %s::oid AND objsubid = 2$$, outbox._snapshot_lock_class(), :qid),
                'nothing is announced before the first insert');
SELECT test_helpers.add(:'q', 1, 'a') AS _ \gset
SELECT results_eq(format($$SELECT mode, granted FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid()
                           AND classid = %s::oid AND objid = %s::oid AND objsubid = 2$$, outbox._snapshot_lock_class(), :qid),
                  $$VALUES ('ShareLock'::text, true)$$,
                  'a REPEATABLE READ insert holds the shared lock (producers of this kind never wait for each other)');
SELECT is((SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid()
             AND classid = outbox._snapshot_lock_class()::oid), 1::bigint,
          'once, however many statements');

SELECT * FROM finish();
ROLLBACK;
