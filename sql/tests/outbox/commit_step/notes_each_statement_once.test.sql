-- Producers' notes for the commit step: the transaction's one row of outbox.commit_hooks, which
-- queues the commit step once, holds its first statement's (the usual transaction writes no note
-- row); later statements append one row of outbox.commit_notes each, never updated (a transaction of
-- n statements rewriting one row cost O(n²)), and mark the hook once. A rolled back savepoint takes
-- its notes, and its hook, with it: a later statement queues the commit step again.
BEGIN;
SELECT plan(11);

SELECT test_helpers.new_queue('k') AS q \gset
SELECT queue_id AS qid FROM outbox.queues WHERE queue = :'q' \gset

SELECT test_helpers.add(:'q', 1, 'many') IS NULL AS _ \gset
SELECT results_eq($$SELECT n_tup_ins, n_tup_upd FROM pg_stat_xact_all_tables
                    WHERE relid IN ('outbox.commit_hooks'::regclass, 'outbox.commit_notes'::regclass) ORDER BY relname$$,
                  $$VALUES (1::bigint, 0::bigint), (0, 0)$$,
                  'one INSERT statement: one hook, no note row');
SELECT results_eq($$SELECT table_oids, keys, more_notes FROM outbox.commit_hooks WHERE xid = pg_current_xact_id()$$,
                  format($$VALUES (ARRAY[%L::regclass::oid], ARRAY['many'], false)$$, :'q'),
                  'its notes are in the hook');
SELECT test_helpers.add(:'q', 49, 'many') IS NULL AS _ \gset
SELECT results_eq($$SELECT n_tup_ins, n_tup_upd FROM pg_stat_xact_all_tables
                    WHERE relid IN ('outbox.commit_hooks'::regclass, 'outbox.commit_notes'::regclass) ORDER BY relname$$,
                  $$VALUES (1::bigint, 1::bigint), (49, 0)$$,
                  '49 more INSERT statements: 49 notes, the hook marked once');
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
                  $$VALUES (1::bigint, 0::bigint)$$,
                  'the statement after it queued the commit step again; the later savepoint''s notes are gone');
SELECT is((SELECT more_notes FROM outbox.commit_hooks WHERE xid = pg_current_xact_id()), false,
          'and so is its mark');
SET CONSTRAINTS outbox.pgdrain_commit IMMEDIATE;
SET CONSTRAINTS outbox.pgdrain_commit DEFERRED;
SELECT results_eq(format('SELECT partition_key FROM outbox.partition_heads WHERE queue_id = %s ORDER BY 1', :qid),
                  $$VALUES ('kept'::text), ('many')$$,
                  'only the kept statement''s key got a head');
SELECT is((SELECT count(*) FROM outbox.commit_hooks WHERE xid = pg_current_xact_id()), 0::bigint,
          'the commit step took its hook');

-- A heads trigger made before 00025 noted every statement in outbox.commit_notes, none in the hook
-- (a queue registered before the upgrade, until 00025 installs its trigger again): those are read.
SELECT format('ALTER TABLE %s DISABLE TRIGGER pgdrain_heads', :'q') \gexec
SELECT (test_helpers.add(:'q', 1, 'noted_the_old_way'))[1] AS old_way \gset
INSERT INTO outbox.commit_hooks (xid) VALUES (pg_current_xact_id());
INSERT INTO outbox.commit_notes (table_oid, keys, ids) VALUES (:'q'::regclass, ARRAY['noted_the_old_way'], ARRAY[:old_way::bigint]);
SELECT format('ALTER TABLE %s ENABLE TRIGGER pgdrain_heads', :'q') \gexec
SET CONSTRAINTS outbox.pgdrain_commit IMMEDIATE;
SET CONSTRAINTS outbox.pgdrain_commit DEFERRED;
SELECT results_eq(format($$SELECT head_id FROM outbox.partition_heads WHERE queue_id = %s AND partition_key = 'noted_the_old_way'$$, :qid),
                  format('VALUES (%s::bigint)', :old_way),
                  'a hook without notes: the commit step reads outbox.commit_notes');

SELECT * FROM finish();
