-- check_indexes is empty exactly when the pending-row indexes are the required ones; it names an
-- extra (decoy) index, a missing required one, and an invalid one.
BEGIN;
SELECT plan(10);

SELECT test_helpers.new_queue('resource_id') AS q \gset
SELECT split_part(:'q', '.', 2) AS t \gset

SELECT is_empty(format('SELECT * FROM outbox.check_indexes(%L)', :'q'),
                'check_indexes is empty for a fresh partitioned queue');

SELECT format('CREATE INDEX %s_decoy ON %s (created_at) WHERE sent_at IS NULL', :'t', :'q') AS ddl \gset
:ddl;
SELECT results_eq(
  format('SELECT problem, index_name, detail FROM outbox.check_indexes(%L)', :'q'),
  format($$VALUES ('decoy'::text, '%1$s_decoy'::text,
                   'CREATE INDEX %1$s_decoy ON public.%1$s USING btree (created_at) WHERE (sent_at IS NULL)'::text)$$, :'t'),
  'check_indexes reports a (created_at) WHERE sent_at IS NULL index as a decoy, by name');

SELECT format('CREATE INDEX %s_full ON %s (created_at)', :'t', :'q') AS ddl \gset
:ddl;
SELECT is((SELECT count(*) FROM outbox.check_indexes(:'q')), 1::bigint,
          'an index that does not cover only pending rows is not a decoy');

SELECT outbox.create_queue(:'q', 'resource_id') IS NULL AS _ \gset
SELECT is((SELECT array_agg(index_name) FROM outbox.check_indexes(:'q')), ARRAY[:'t' || '_decoy'],
          'create_queue leaves a foreign decoy in place (check_indexes still names it)');

SELECT format('DROP INDEX %s_decoy', :'q') AS ddl \gset
:ddl;
SELECT format('DROP INDEX %s_pgdrain_partition', :'q') AS ddl \gset
:ddl;
SELECT results_eq(
  format('SELECT problem, index_name, detail FROM outbox.check_indexes(%L)', :'q'),
  format($$VALUES ('missing'::text, NULL::text, 'CREATE INDEX ON %s (resource_id, id) WHERE sent_at IS NULL'::text)$$, :'q'),
  'check_indexes reports a dropped (partition column, id) index as missing');

SELECT format('DROP INDEX %s_pgdrain_claim', :'q') AS ddl \gset
:ddl;
SELECT set_eq(
  format('SELECT problem, detail FROM outbox.check_indexes(%L)', :'q'),
  format($$VALUES ('missing'::text, 'CREATE INDEX ON %1$s (resource_id, id) WHERE sent_at IS NULL'::text),
                  ('missing', 'CREATE INDEX ON %1$s (attempt_count, id) WHERE sent_at IS NULL')$$, :'q'),
  'check_indexes reports both required indexes when both are missing');

SELECT lives_ok(format('SELECT outbox.create_queue(%L, %L)', :'q', 'resource_id'),
                'create_queue can repair a queue whose indexes were dropped');
SELECT is_empty(format('SELECT * FROM outbox.check_indexes(%L)', :'q'),
                'after the repair check_indexes is empty again');

-- An index that failed to build (as CREATE INDEX CONCURRENTLY leaves it) is reported invalid
-- and does not count as the required index. Simulated in the catalog; rolled back with the test.
UPDATE pg_index SET indisvalid = false WHERE indexrelid = (:'q' || '_pgdrain_claim')::regclass;
SELECT set_eq(
  format('SELECT problem, index_name FROM outbox.check_indexes(%L)', :'q'),
  format($$VALUES ('missing'::text, NULL::text), ('invalid', '%s_pgdrain_claim')$$, :'t'),
  'check_indexes reports an invalid required index as invalid and the required index as missing');

-- Unpartitioned queue: a (key, id) index is just another decoy.
SELECT test_helpers.new_queue() AS q2 \gset
SELECT format('CREATE INDEX %s_by_type ON %s (event_type, id) WHERE sent_at IS NULL', split_part(:'q2', '.', 2), :'q2') AS ddl \gset
:ddl;
SELECT results_eq(
  format('SELECT problem, index_name FROM outbox.check_indexes(%L)', :'q2'),
  format($$VALUES ('decoy'::text, '%s_by_type'::text)$$, split_part(:'q2', '.', 2)),
  'check_indexes names a decoy on an unpartitioned queue');

SELECT * FROM finish();
ROLLBACK;
