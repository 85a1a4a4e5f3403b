-- drop_queue unregisters a queue whose table was already dropped outside it: the registry row, heads,
-- built-mark and clocks go; with drop_table = true too. The name is then free for a new queue.
BEGIN;
SELECT plan(6);

SELECT test_helpers.new_queue('k') AS q \gset
SELECT queue_id AS qid FROM outbox.queues WHERE queue = :'q' \gset
SELECT test_helpers.add(:'q', 2, 'a') IS NULL AS _ \gset
SET CONSTRAINTS outbox.pgdrain_commit IMMEDIATE;
SET CONSTRAINTS outbox.pgdrain_commit DEFERRED;
SELECT count(*) AS claimed FROM outbox.claim_batch(:'q', 10) \gset
SELECT format('DROP TABLE %s', :'q') AS drop_it \gset
:drop_it;

SELECT lives_ok(format('SELECT outbox.drop_queue(%L)', :'q'), 'drop_queue works when the table is gone');
SELECT is_empty(format('SELECT 1 FROM outbox.queues WHERE queue_id = %s', :qid), 'the registry row is gone');
SELECT is_empty(format($$SELECT 1 FROM outbox.partition_heads WHERE queue_id = %1$s
                         UNION ALL SELECT 1 FROM outbox.partition_heads_built WHERE queue_id = %1$s
                         UNION ALL SELECT 1 FROM outbox.partition_clocks WHERE queue_id = %1$s$$, :qid),
                'its heads, built-mark and clocks are gone');
SELECT lives_ok(format('SELECT outbox.create_queue(%L, %L)', :'q', 'k'), 'the name can be used for a new queue');

SELECT format('DROP TABLE %s', :'q') AS drop_it \gset
:drop_it;
SELECT lives_ok(format('SELECT outbox.drop_queue(%L, true)', :'q'), 'drop_queue with drop_table works when the table is gone');
SELECT is_empty(format('SELECT 1 FROM outbox.queues WHERE queue = %L', :'q'), 'and unregisters the queue');

SELECT * FROM finish();
ROLLBACK;
