-- SET CONSTRAINTS ALL IMMEDIATE (ORMs and migration tools do it) runs the commit step at the end of
-- each producing statement: every statement's keys get their heads, not only the first one's, and a
-- statement after the documented SET CONSTRAINTS outbox.pgdrain_commit IMMEDIATE queues it again.
BEGIN;
SELECT plan(4);

SELECT test_helpers.new_queue('k') AS q \gset
SELECT queue_id AS qid FROM outbox.queues WHERE queue = :'q' \gset

SET CONSTRAINTS ALL IMMEDIATE;
SELECT test_helpers.add(:'q', 1, 'p');
SELECT test_helpers.add(:'q', 1, 'q');
SELECT test_helpers.add(:'q', 1, 'r');
SELECT results_eq(format('SELECT partition_key FROM outbox.partition_heads WHERE queue_id = %s ORDER BY 1', :qid),
                  $$VALUES ('p'::text), ('q'), ('r')$$,
                  'under immediate constraints each statement''s keys get their heads');
SELECT is((SELECT count(*) FROM outbox.commit_hooks), 0::bigint,
          'no commit step is left queued after each immediate run');

SET CONSTRAINTS ALL DEFERRED;
SELECT test_helpers.add(:'q', 1, 's');
SET CONSTRAINTS outbox.pgdrain_commit IMMEDIATE;
SELECT test_helpers.add(:'q', 1, 't');
SELECT test_helpers.add(:'q', 1, 'u');
SELECT results_eq(format('SELECT partition_key FROM outbox.partition_heads WHERE queue_id = %s AND partition_key >= %L ORDER BY 1', :qid, 's'),
                  $$VALUES ('s'::text), ('t'), ('u')$$,
                  'statements after SET CONSTRAINTS outbox.pgdrain_commit IMMEDIATE queue the commit step again');
SELECT is((SELECT count(*) FROM outbox.commit_hooks), 0::bigint, 'the last immediate run left no note queued');

SELECT * FROM finish();
ROLLBACK;
