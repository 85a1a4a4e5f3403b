-- TRUNCATE (also RESTART IDENTITY) of a queue table drops the queue's partition heads and clocks
-- (pgdrain_truncate), and this transaction's note of the table for its commit step, so rows written
-- afterwards are claimed at once and keep their ids. A rolled back TRUNCATE keeps them.
BEGIN;
SELECT plan(8);

SELECT test_helpers.new_queue('k') AS q \gset
SELECT queue_id AS qid FROM outbox.queues WHERE queue = :'q' \gset
SELECT test_helpers.add(:'q', 5, 'a') IS NULL AS _ \gset
SET CONSTRAINTS outbox.pgdrain_commit IMMEDIATE;
SET CONSTRAINTS outbox.pgdrain_commit DEFERRED;
SELECT count(*) AS claimed FROM outbox.claim_batch(:'q', 10) \gset

SAVEPOINT before_truncate;
SELECT format('TRUNCATE %s', :'q') AS truncate_it \gset
:truncate_it;
ROLLBACK TO SAVEPOINT before_truncate;
SELECT isnt_empty(format('SELECT 1 FROM outbox.partition_clocks WHERE queue_id = %s', :qid),
                  'a rolled back TRUNCATE keeps the clocks');

SELECT test_helpers.add(:'q', 2, 'b') IS NULL AS _ \gset
SELECT format('TRUNCATE %s RESTART IDENTITY', :'q') AS truncate_it \gset
SELECT lives_ok(:'truncate_it', 'a queue table can be truncated with RESTART IDENTITY');
SELECT is_empty(format('SELECT 1 FROM outbox.partition_heads WHERE queue_id = %s', :qid), 'its partition heads are gone');
SELECT is_empty(format('SELECT 1 FROM outbox.partition_clocks WHERE queue_id = %s', :qid), 'its clocks are gone');
SELECT is_empty('SELECT 1 FROM outbox.commit_notes WHERE xid = pg_current_xact_id()',
                'the note of the rows this transaction wrote before the TRUNCATE is forgotten');

SELECT test_helpers.add(:'q', 3, 'a') AS a_ids \gset
SET CONSTRAINTS outbox.pgdrain_commit IMMEDIATE;
SET CONSTRAINTS outbox.pgdrain_commit DEFERRED;
SELECT results_eq(format('SELECT array_agg(id ORDER BY id) FROM %s', :'q'), $$VALUES ('{1,2,3}'::bigint[])$$,
                  'rows written after it keep their ids (no old clock makes them late)');
SELECT results_eq(format('SELECT count(*), max(committed_max) FROM outbox.partition_clocks WHERE queue_id = %s', :qid),
                  $$VALUES (1::bigint, 3::bigint)$$, 'the only clock is the new rows'' key''s, at their largest id');
SELECT results_eq(format('SELECT id FROM outbox.claim_batch(%L, 10)', :'q'), $$VALUES (1::bigint)$$,
                  'the first new row is claimed at once');

SELECT * FROM finish();
ROLLBACK;
