-- A key whose producer left a wake note (its head was held by a claim at the producer's commit) is
-- not stuck: repair reports nothing for it, and the next claim applies the note and returns the row.
BEGIN;
SELECT plan(3);

SELECT test_helpers.new_queue('k') AS q \gset
SELECT queue_id AS qid FROM outbox.queues WHERE queue = :'q' \gset
SELECT count(*) AS _ FROM outbox.claim_batch(:'q', 1) \gset
SELECT test_helpers.add(:'q', 1, 'a') AS a \gset
SET CONSTRAINTS outbox.pgdrain_commit IMMEDIATE;
SET CONSTRAINTS outbox.pgdrain_commit DEFERRED;
-- As a claim deleting the head while the producer committed would leave it: no head, a note.
DELETE FROM outbox.partition_heads WHERE queue_id = :qid AND partition_key = 'a';
INSERT INTO outbox.partition_wakes (queue_id, partition_key, low_id) VALUES (:qid, 'a', (:'a'::bigint[])[1]);
SELECT is_empty(format($$SELECT * FROM outbox.repair(%L, true)$$, :'q'), 'repair finds nothing to repair');
SELECT results_eq(format($$SELECT id FROM outbox.claim_batch(%L, 10)$$, :'q'),
  format('VALUES (%s::bigint)', (:'a'::bigint[])[1]), 'the next claim applies the note and returns the row');
SELECT is_empty(format($$SELECT 1 FROM outbox.partition_wakes WHERE queue_id = %s$$, :qid), 'the note is gone');

SELECT * FROM finish();
ROLLBACK;
