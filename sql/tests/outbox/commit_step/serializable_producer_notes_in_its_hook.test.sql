-- A SERIALIZABLE producer notes its rows in its own row of outbox.commit_hooks, not in
-- outbox.commit_notes (00023: its commit step finds them there without a predicate lock). What
-- reads the notes reads these too: a claim in the producing transaction makes the heads of its keys
-- at once, a TRUNCATE forgets the truncated table's entries, and the commit step (run here by SET
-- CONSTRAINTS IMMEDIATE) deletes the hook and leaves each key a wake note the next claim applies.
BEGIN ISOLATION LEVEL SERIALIZABLE;
SELECT plan(8);

SELECT test_helpers.new_queue('k') AS q \gset
SELECT test_helpers.new_queue('k') AS other \gset
SELECT oid AS table_oid FROM pg_class WHERE oid = :'q'::regclass \gset
SELECT test_helpers.add(:'q', 2, 'a') IS NULL AS _ \gset
SELECT test_helpers.add(:'q', 1, 'b') IS NULL AS _ \gset

SELECT is_empty('SELECT 1 FROM outbox.commit_notes WHERE xid = pg_current_xact_id()', 'no note rows');
SELECT results_eq('SELECT keys, ids FROM outbox.commit_hooks WHERE xid = pg_current_xact_id()',
                  $$VALUES ('{a,a,b}'::text[], '{1,2,3}'::bigint[])$$,
                  'the keys and ids, in the hook, statement after statement');
SELECT results_eq(format('SELECT id FROM outbox.claim_batch(%L, 10) ORDER BY id', :'q'), $$VALUES (1::bigint), (3)$$,
                  'a claim in the producing transaction makes the heads of its keys');

SELECT test_helpers.add(:'other', 1, 'c') IS NULL AS _ \gset
SELECT format('TRUNCATE %s', :'q') AS truncate_it \gset
:truncate_it;
SELECT results_eq('SELECT keys, ids FROM outbox.commit_hooks WHERE xid = pg_current_xact_id()',
                  $$VALUES ('{c}'::text[], '{1}'::bigint[])$$,
                  'TRUNCATE forgets the truncated table''s entries, and keeps the other queue''s');

SELECT test_helpers.add(:'q', 1, 'd') IS NULL AS _ \gset
SET CONSTRAINTS outbox.pgdrain_commit IMMEDIATE;
SET CONSTRAINTS outbox.pgdrain_commit DEFERRED;
SELECT is_empty('SELECT 1 FROM outbox.commit_hooks WHERE xid = pg_current_xact_id()', 'the commit step deletes the hook');
SELECT results_eq(format('SELECT partition_key, low_id FROM outbox.partition_wakes w JOIN outbox.queues q USING (queue_id)
                          WHERE q.queue IN (%L, %L) ORDER BY 1', :'q', :'other'),
                  $$VALUES ('c'::text, 1::bigint), ('d', 4)$$,
                  'and leaves each key a wake note');
SELECT results_eq(format('SELECT partition_key, id FROM outbox.claim_batch(%L, 10)', :'other'), $$VALUES ('c'::text, 1::bigint)$$,
                  'which the next claim applies');
SELECT results_eq(format('SELECT partition_key, id FROM outbox.claim_batch(%L, 10)', :'q'), $$VALUES ('d'::text, 4::bigint)$$,
                  'on each queue');

SELECT * FROM finish();
ROLLBACK;
