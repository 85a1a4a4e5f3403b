-- A single-row producer of a key without a head makes its head with its row as floor only while
-- the queue's heads are complete and no wake note waits for the key. Otherwise "no head" may hide
-- older pending rows of the key (heads lost in a crash reset of the unlogged state, or a producer
-- that committed while a claim was deleting the head left a note): the floor is then 0, and a
-- claim delivers those older rows first.
BEGIN;
SELECT plan(7);

SELECT test_helpers.new_queue('k') AS q \gset
SELECT queue_id AS qid FROM outbox.queues WHERE queue = :'q' \gset

-- A new key, nothing in the way: its row is its floor.
SELECT (test_helpers.add(:'q', 1, 'plain'))[1] AS plain \gset
SET CONSTRAINTS outbox.pgdrain_commit IMMEDIATE;
SET CONSTRAINTS outbox.pgdrain_commit DEFERRED;
SELECT results_eq(format($$SELECT head_id, floor_id FROM outbox.partition_heads
                           WHERE queue_id = %s AND partition_key = 'plain'$$, :qid),
                  format('VALUES (%s::bigint, %s::bigint)', :plain, :plain),
                  'a new key''s head: its row, which is also its floor');

-- A wake note waits for key noted: a row of it committed while a claim deleted its head.
SELECT (test_helpers.add(:'q', 1, 'noted'))[1] AS noted_first \gset
SET CONSTRAINTS outbox.pgdrain_commit IMMEDIATE;
SET CONSTRAINTS outbox.pgdrain_commit DEFERRED;
DELETE FROM outbox.partition_heads WHERE queue_id = :qid AND partition_key = 'noted';
INSERT INTO outbox.partition_wakes (queue_id, partition_key, low_id) VALUES (:qid, 'noted', :noted_first);
SELECT (test_helpers.add(:'q', 1, 'noted'))[1] AS noted_second \gset
SET CONSTRAINTS outbox.pgdrain_commit IMMEDIATE;
SET CONSTRAINTS outbox.pgdrain_commit DEFERRED;
SELECT results_eq(format($$SELECT head_id, floor_id FROM outbox.partition_heads
                           WHERE queue_id = %s AND partition_key = 'noted'$$, :qid),
                  format('VALUES (%s::bigint, 0::bigint)', :noted_second),
                  'with a wake note waiting for the key, its new head''s floor is 0');

-- The heads are lost (a crash reset of the unlogged state) while a row of key lost is pending.
SELECT (test_helpers.add(:'q', 1, 'lost'))[1] AS lost_first \gset
SET CONSTRAINTS outbox.pgdrain_commit IMMEDIATE;
SET CONSTRAINTS outbox.pgdrain_commit DEFERRED;
DELETE FROM outbox.partition_heads WHERE queue_id = :qid AND partition_key = 'lost';
DELETE FROM outbox.partition_heads_built WHERE queue_id = :qid;
SELECT (test_helpers.add(:'q', 1, 'lost'))[1] AS lost_second \gset
SET CONSTRAINTS outbox.pgdrain_commit IMMEDIATE;
SET CONSTRAINTS outbox.pgdrain_commit DEFERRED;
SELECT results_eq(format($$SELECT head_id, floor_id FROM outbox.partition_heads
                           WHERE queue_id = %s AND partition_key = 'lost'$$, :qid),
                  format('VALUES (%s::bigint, 0::bigint)', :lost_second),
                  'with the heads not complete, a new head''s floor is 0');

-- A claim delivers each key's rows in order: the older rows first.
SELECT results_eq(format($$SELECT id FROM outbox.claim_batch(%L, 10) ORDER BY id$$, :'q'),
                  format('VALUES (%s::bigint), (%s), (%s)', :plain, :noted_first, :lost_first),
                  'a claim takes each key''s oldest row, not the row whose head the producer made');
SELECT is((SELECT count(*) FROM outbox.partition_wakes WHERE queue_id = :qid), 0::bigint,
          'the claim applied the wake note');
SELECT is((SELECT count(*) FROM outbox.partition_heads_built WHERE queue_id = :qid), 1::bigint,
          'and rebuilt the heads');
SELECT results_eq(format($$SELECT partition_key, head_id FROM outbox.partition_heads
                           WHERE queue_id = %s ORDER BY 1$$, :qid),
                  format($$VALUES ('lost'::text, %s::bigint), ('noted', %s), ('plain', %s)$$,
                         :lost_first, :noted_first, :plain),
                  'every head points at its key''s oldest row');

SELECT * FROM finish();
