-- A session keeps the plans of its head moves (outbox._refresh_heads) for its whole life, and right
-- after a crash it makes them on an empty heads table. Joined on the key, the head update of such a
-- plan read every head of the queue for each call: after a crash with a deep backlog, results and
-- the rebuild's parts slowed down as the heads came back (500 keys beside 14,500 heads: 316 ms),
-- until autovacuum analyzed the table. Heads are now moved at the ctid the statement read them at:
-- a few index entries read per key whatever the plan was made on.
BEGIN;
SELECT plan(2);

SELECT test_helpers.new_queue('k') AS q \gset
SELECT queue_id AS qid FROM outbox.queues WHERE queue = :'q' \gset
INSERT INTO :q (event_type, payload, k)
SELECT 'e', '{}', 'k' || pg_catalog.lpad(g::text, 5, '0') FROM generate_series(1, 20000) g, generate_series(1, 2);
SET CONSTRAINTS outbox.pgdrain_commit IMMEDIATE;
SET CONSTRAINTS outbox.pgdrain_commit DEFERRED;

-- The crash: the heads table is empty, and this session plans its head moves now.
TRUNCATE outbox.partition_heads, outbox.partition_heads_built;
-- As after a crash: the catalog still describes the table as it was (2 million heads), its file is
-- empty, so the planner counts no row in it.
UPDATE pg_catalog.pg_class SET reltuples = 2000000, relpages = 25000 WHERE oid = 'outbox.partition_heads'::regclass;
UPDATE pg_catalog.pg_class SET reltuples = 2000000, relpages = 8000 WHERE oid = 'outbox.partition_heads_pkey'::regclass;
SELECT outbox._refresh_heads(q, ARRAY['k00001', 'no rows']) FROM outbox.queues q WHERE q.queue_id = :qid;
SELECT outbox._rebuild_heads(:qid);
SELECT is((SELECT count(*) FROM outbox.partition_heads WHERE queue_id = :qid), 20000::bigint,
          'the heads came back');

-- 1,000 keys: the first row of 500 of them was sent (their heads move on, by an update), both rows
-- of the other 500 (their heads go, by a delete under the lock).
UPDATE :q SET sent_at = now()
WHERE id IN (SELECT min(id) FROM :q WHERE k <= 'k00500' GROUP BY k) OR k BETWEEN 'k00501' AND 'k01000';
SELECT pg_catalog.pg_stat_get_xact_tuples_returned('outbox.partition_heads_pkey'::regclass) AS before \gset
SELECT outbox._refresh_heads(q, ARRAY(SELECT 'k' || pg_catalog.lpad(g::text, 5, '0') FROM generate_series(1, 1000) g))
FROM outbox.queues q WHERE q.queue_id = :qid;
SELECT cmp_ok(pg_catalog.pg_stat_get_xact_tuples_returned('outbox.partition_heads_pkey'::regclass) - :before, '<=', 5000::bigint,
              'moving or deleting 1,000 of 20,000 heads reads a few index entries per key, not every head');
SELECT * FROM finish();
ROLLBACK;
