-- Registration follows the table: after DROP TABLE (or DROP SCHEMA ... CASCADE) outside drop_queue,
-- create_queue of the same name registers the new table and drops every piece of state derived from
-- the old one (partition heads, built-mark, clocks), so the new queue's rows are claimed from the
-- first, in order; the partition column may then change (the new table is a new queue).
BEGIN;
SELECT plan(10);

SELECT test_helpers.new_queue('k') AS q \gset
SELECT queue_id AS qid FROM outbox.queues WHERE queue = :'q' \gset
SELECT test_helpers.add(:'q', 5, 'a') IS NULL AS _ \gset
SELECT test_helpers.add(:'q', 5, 'b') IS NULL AS _ \gset
SET CONSTRAINTS outbox.pgdrain_commit IMMEDIATE;
SET CONSTRAINTS outbox.pgdrain_commit DEFERRED;
-- Claim (and so park) both heads; the clocks of a and b are at 5 and 10.
SELECT count(*) AS claimed FROM outbox.claim_batch(:'q', 10) \gset

SELECT format('DROP TABLE %s', :'q') AS drop_it \gset
:drop_it;
SELECT lives_ok(format('SELECT outbox.create_queue(%L, %L)', :'q', 'k'),
                'create_queue registers a new table under the name of a dropped one');
SELECT is((SELECT table_oid FROM outbox.queues WHERE queue = :'q')::oid, :'q'::regclass::oid,
          'the registration follows the new table');
SELECT is_empty(format('SELECT 1 FROM outbox.partition_clocks WHERE queue_id = %s', :qid),
                'the old table''s clocks are gone');
SELECT is_empty(format('SELECT 1 FROM outbox.partition_heads WHERE queue_id = %s', :qid),
                'the old table''s partition heads are gone');

SELECT test_helpers.add(:'q', 2, 'a') AS a_ids \gset
SELECT test_helpers.add(:'q', 2, 'b') AS b_ids \gset
SET CONSTRAINTS outbox.pgdrain_commit IMMEDIATE;
SET CONSTRAINTS outbox.pgdrain_commit DEFERRED;
SELECT results_eq(format('SELECT array_agg(id ORDER BY id) FROM %s', :'q'), $$VALUES ('{1,2,3,4}'::bigint[])$$,
                  'the new rows keep their ids (no old clock makes them late)');
SELECT results_eq(format('SELECT partition_key, id FROM outbox.claim_batch(%L, 10) ORDER BY id', :'q'),
                  $$VALUES ('a'::text, 1::bigint), ('b', 3)$$,
                  'the first row of each key of the new table is claimed at once');

-- DROP SCHEMA ... CASCADE, the schema made again, another partition column.
CREATE SCHEMA reg_drop_schema;
SELECT outbox.create_queue('reg_drop_schema.events', 'k');
SELECT queue_id AS sqid FROM outbox.queues WHERE queue = 'reg_drop_schema.events' \gset
SELECT test_helpers.add('reg_drop_schema.events', 3, 'x') IS NULL AS _ \gset
SELECT count(*) AS claimed FROM outbox.claim_batch('reg_drop_schema.events', 10) \gset
SET LOCAL client_min_messages = warning;
DROP SCHEMA reg_drop_schema CASCADE;
CREATE SCHEMA reg_drop_schema;
SELECT lives_ok($$SELECT outbox.create_queue('reg_drop_schema.events', 'tenant')$$,
                'after DROP SCHEMA ... CASCADE the queue is made again, with another partition column');
SELECT results_eq($$SELECT queue_id, partition_column FROM outbox.queues WHERE queue = 'reg_drop_schema.events'$$,
                  format('VALUES (%s, %L::text)', :sqid, 'tenant'), 'the registration keeps its queue_id and takes the new column');
SELECT is_empty(format('SELECT 1 FROM outbox.partition_heads WHERE queue_id = %s', :sqid),
                'no head of the dropped schema''s table is left');
INSERT INTO reg_drop_schema.events (event_type, payload, tenant) VALUES ('e', '{}', 'x'), ('e', '{}', 'x');
SELECT results_eq($$SELECT partition_key, id FROM outbox.claim_batch('reg_drop_schema.events', 10)$$,
                  $$VALUES ('x'::text, 1::bigint)$$, 'the new table''s first row is claimed');

SELECT * FROM finish();
ROLLBACK;
