-- SET CONSTRAINTS ALL IMMEDIATE (ORMs and migration tools do it) would run the commit step inside
-- each producing statement and keep its commit locks to the end of the transaction (two producers
-- writing two keys in opposite order then deadlock: issue 29). The commit step defers itself to
-- COMMIT instead, taking no lock; SET CONSTRAINTS outbox.pgdrain_commit IMMEDIATE after the writes
-- still runs it at once, and statements after that queue it again, for COMMIT.
BEGIN;
SELECT plan(9);

SELECT test_helpers.new_queue('k') AS q \gset
SELECT queue_id AS qid FROM outbox.queues WHERE queue = :'q' \gset

SET CONSTRAINTS ALL IMMEDIATE;
SELECT test_helpers.add(:'q', 1, 'p');
SELECT test_helpers.add(:'q', 1, 'q');
SELECT test_helpers.add(:'q', 1, 'r');
SELECT is((SELECT count(*) FROM outbox.partition_heads WHERE queue_id = :qid), 0::bigint,
          'under immediate constraints no statement runs the commit step');
SELECT is((SELECT count(*) FROM outbox.partition_clocks WHERE queue_id = :qid), 0::bigint,
          'and no statement takes a commit lock (a clock row)');
SELECT is((SELECT count(*) FROM outbox.commit_hooks), 1::bigint, 'the commit step stays queued');
SELECT results_eq($$SELECT h.keys, (SELECT count(*) FROM outbox.commit_notes) FROM outbox.commit_hooks h$$,
                  $$VALUES (ARRAY['p'], 2::bigint)$$, 'with every statement''s notes (the first in the hook)');

SET CONSTRAINTS outbox.pgdrain_commit IMMEDIATE;
SELECT results_eq(format('SELECT partition_key FROM outbox.partition_heads WHERE queue_id = %s ORDER BY 1', :qid),
                  $$VALUES ('p'::text), ('q'), ('r')$$,
                  'SET CONSTRAINTS outbox.pgdrain_commit IMMEDIATE after the writes runs it for every statement''s keys');
SELECT is((SELECT count(*) FROM outbox.commit_hooks), 0::bigint, 'and leaves nothing queued');

SELECT test_helpers.add(:'q', 1, 's');
SELECT is((SELECT count(*) FROM outbox.partition_heads WHERE queue_id = :qid AND partition_key = 's'), 0::bigint,
          'a statement after it queues the commit step again, for COMMIT');
SET CONSTRAINTS ALL IMMEDIATE;
SELECT is((SELECT count(*) FROM outbox.partition_heads WHERE queue_id = :qid AND partition_key = 's'), 1::bigint,
          'SET CONSTRAINTS ALL IMMEDIATE after the writes runs it at once');
SELECT is((SELECT count(*) FROM outbox.commit_hooks), 0::bigint, 'the last run left nothing queued');

SELECT * FROM finish();
ROLLBACK;
