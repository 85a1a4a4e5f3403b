-- Producers' notes for the commit step are appended, one row of outbox.commit_notes per statement,
-- never updated (a transaction of n statements rewriting one row cost O(n²)), and the transaction's
-- one row of outbox.commit_hooks queues the commit step once. A rolled back savepoint takes its
-- notes, and its hook, with it: a later statement queues the commit step again.
BEGIN;
SELECT plan(7);

SELECT test_helpers.new_queue('k') AS q \gset
SELECT queue_id AS qid FROM outbox.queues WHERE queue = :'q' \gset

SELECT test_helpers.add(:'q', 50, 'many') IS NULL AS _ \gset
SELECT results_eq($$SELECT n_tup_ins, n_tup_upd FROM pg_stat_xact_all_tables
                    WHERE relid IN ('outbox.commit_hooks'::regclass, 'outbox.commit_notes'::regclass) ORDER BY relname$$,
                  $$VALUES (1::bigint, 0::bigint), (50, 0)$$,
                  '50 INSERT statements: one hook, 50 notes, nothing updated');
SET CONSTRAINTS outbox.pgdrain_commit IMMEDIATE;
SET CONSTRAINTS outbox.pgdrain_commit DEFERRED;
SELECT results_eq(format('SELECT head_id FROM outbox.partition_heads WHERE queue_id = %s', :qid),
                  format('SELECT min(id) FROM %s', :'q'),
                  'the commit step read every note: the key''s head is its first row');
SELECT is((SELECT count(*) FROM outbox.commit_notes WHERE xid = pg_current_xact_id()), 0::bigint,
          'and took them');

-- The hook is first inserted inside a savepoint that is rolled back.
SAVEPOINT first_statement;
SELECT test_helpers.add(:'q', 1, 'rolled_back') IS NULL AS _ \gset
ROLLBACK TO SAVEPOINT first_statement;
SELECT is((SELECT count(*) FROM outbox.commit_hooks WHERE xid = pg_current_xact_id()), 0::bigint,
          'a rolled back savepoint takes its hook with it');
SELECT test_helpers.add(:'q', 1, 'kept') IS NULL AS _ \gset
SAVEPOINT later_statement;
SELECT test_helpers.add(:'q', 2, 'kept_too') IS NULL AS _ \gset
SELECT test_helpers.add(:'q', 1, 'dropped') IS NULL AS _ \gset
ROLLBACK TO SAVEPOINT later_statement;
SELECT results_eq($$SELECT (SELECT count(*) FROM outbox.commit_hooks WHERE xid = pg_current_xact_id()),
                           (SELECT count(*) FROM outbox.commit_notes WHERE xid = pg_current_xact_id())$$,
                  $$VALUES (1::bigint, 1::bigint)$$,
                  'the statement after it queued the commit step again; the later savepoint''s notes are gone');
SET CONSTRAINTS outbox.pgdrain_commit IMMEDIATE;
SET CONSTRAINTS outbox.pgdrain_commit DEFERRED;
SELECT results_eq(format('SELECT partition_key FROM outbox.partition_heads WHERE queue_id = %s ORDER BY 1', :qid),
                  $$VALUES ('kept'::text), ('many')$$,
                  'only the kept statement''s key got a head');
SELECT is((SELECT count(*) FROM outbox.commit_hooks WHERE xid = pg_current_xact_id()), 0::bigint,
          'the commit step took its hook');

SELECT * FROM finish();
