-- After a crash reset of the unlogged state the partition heads come back in parts, each committed
-- with the claim that made it (outbox._restore_heads): keys in their order, 500 at a time until
-- 50 ms have passed, from where the last part stopped. In one statement a deep backlog's rebuild
-- outlasted a drainer's ClaimTimeout, was rolled back, and the queue stayed stuck. Meanwhile claims
-- deliver from the heads there are, each key's first row only, and the last part marks the heads
-- built.
BEGIN;
SELECT plan(13);

SELECT test_helpers.new_queue('k') AS q \gset
SELECT queue_id AS qid FROM outbox.queues WHERE queue = :'q' \gset

-- 20,000 keys with two rows each; key k00001's first row is poisoned, key k00002's first is sent.
INSERT INTO :q (event_type, payload, k)
SELECT 'e', '{}', 'k' || pg_catalog.lpad(g::text, 5, '0') FROM generate_series(1, 20000) g, generate_series(1, 2);
SET CONSTRAINTS outbox.pgdrain_commit IMMEDIATE;
SET CONSTRAINTS outbox.pgdrain_commit DEFERRED;
UPDATE :q SET attempt_count = 10 WHERE id = (SELECT min(id) FROM :q WHERE k = 'k00001');
UPDATE :q SET sent_at = now() WHERE id = (SELECT min(id) FROM :q WHERE k = 'k00002');
SELECT outbox._rebuild_heads(:qid);
CREATE TEMPORARY TABLE heads_before AS
SELECT partition_key, head_id FROM outbox.partition_heads WHERE queue_id = :qid;
SELECT is((SELECT count(*) FROM heads_before), 20000::bigint, 'a head per key before the crash');

-- The crash: PostgreSQL empties the unlogged tables.
DELETE FROM outbox.partition_heads WHERE queue_id = :qid;
DELETE FROM outbox.partition_heads_built WHERE queue_id = :qid;

SELECT outbox._restore_heads(q) FROM outbox.queues q WHERE q.queue_id = :qid;
SELECT ok(NOT EXISTS (SELECT 1 FROM outbox.partition_heads_built WHERE queue_id = :qid),
          'one call is one part: the heads are not built yet');
SELECT ok((SELECT count(*) BETWEEN 500 AND 19999 FROM outbox.partition_heads WHERE queue_id = :qid),
          'the first part made some of the heads');
SELECT is((SELECT after_key FROM outbox.partition_heads_restored WHERE queue_id = :qid),
          (SELECT max(partition_key) FROM outbox.partition_heads WHERE queue_id = :qid),
          'the part noted the last key it did');
SELECT is((SELECT count(*) FROM outbox.partition_heads WHERE queue_id = :qid),
          (SELECT count(*) FROM heads_before
           WHERE partition_key <= (SELECT after_key FROM outbox.partition_heads_restored WHERE queue_id = :qid)),
          'keys in their order: every key up to it has its head, none past it');

-- Claims meanwhile take what the heads there are offer: each key's first deliverable row.
CREATE TEMPORARY TABLE claimed AS SELECT id, partition_key AS k FROM outbox.claim_batch(:'q', 20, '1 hour');
SELECT is((SELECT count(*) FROM claimed), 20::bigint, 'a claim in between delivers');
SELECT is_empty($$SELECT c.id FROM claimed c JOIN heads_before b ON b.partition_key = c.k
                  WHERE b.head_id <> c.id$$,
                'each row claimed is the first deliverable row of its key');

-- A producer commits a row of a key no part has reached yet: its head is made at once, with floor
-- 0, so the search of a claim that looks at it finds the key's oldest row, not the new one.
SELECT min(id) AS oldest FROM :q WHERE k = 'k20000' \gset
INSERT INTO :q (event_type, payload, k) VALUES ('e', '{}', 'k20000');
SET CONSTRAINTS outbox.pgdrain_commit IMMEDIATE;
SET CONSTRAINTS outbox.pgdrain_commit DEFERRED;
SELECT is((SELECT floor_id FROM outbox.partition_heads WHERE queue_id = :qid AND partition_key = 'k20000'), 0::bigint,
          'a head a producer makes before the heads are built has floor 0');
SELECT outbox._refresh_heads(q, ARRAY['k20000']) IS NULL AS refreshed FROM outbox.queues q WHERE q.queue_id = :qid \gset
SELECT is((SELECT head_id FROM outbox.partition_heads WHERE queue_id = :qid AND partition_key = 'k20000'), :oldest::bigint,
          'looked at, that head points at the key''s oldest row, not the producer''s');

-- The next parts go on from where the last one stopped, until none is left.
SELECT set_config('test.q', :'q', true) IS NOT NULL AS set \gset
DO $$
BEGIN
  FOR i IN 1..1000 LOOP
    EXIT WHEN EXISTS (SELECT 1 FROM outbox.partition_heads_built b
                      JOIN outbox.queues q USING (queue_id) WHERE q.queue = current_setting('test.q'));
    PERFORM outbox._restore_heads(q) FROM outbox.queues q WHERE q.queue = current_setting('test.q');
  END LOOP;
END $$;
SELECT ok(EXISTS (SELECT 1 FROM outbox.partition_heads_built WHERE queue_id = :qid), 'the last part marks the heads built');
SELECT is_empty(format('SELECT 1 FROM outbox.partition_heads_restored WHERE queue_id = %s', :qid),
                'and forgets where the rebuild was');
SELECT set_eq(format('SELECT partition_key, head_id FROM outbox.partition_heads WHERE queue_id = %s', :qid),
              'SELECT partition_key, head_id FROM heads_before',
              'every key has its head again, at the same row as before the crash');
SELECT is((SELECT count(*) FROM outbox.claim_batch(:'q', 100) c JOIN claimed ON claimed.k = c.partition_key), 0::bigint,
          'keys whose rows are leased stay held');

SELECT * FROM finish();
ROLLBACK;
