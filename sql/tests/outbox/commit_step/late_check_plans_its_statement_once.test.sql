-- The commit step's late check (outbox._late_rows) runs its statement through a function made for
-- the queue (outbox._late_rows_function), which plans it once per session: left to choose,
-- PostgreSQL planned it again on every call (its range of ids, as constants, looks cheaper than a
-- generic plan), about 250 µs of each late check beside running drainers. The function pins the
-- planner settings that one plan is made under, and that plan reads one range of the queue
-- table's primary key, also while the table's statistics say it is empty.
BEGIN;
SELECT plan(4);

SELECT test_helpers.new_queue('k') AS q \gset
SELECT queue_id AS qid FROM outbox.queues WHERE queue = :'q' \gset
SELECT p.oid::regprocedure AS late_fn, p.proconfig::text[] AS config,
       substring(p.prosrc from '^BEGIN RETURN \((.*)\); END$') AS stmt
FROM pg_proc p WHERE p.pronamespace = 'outbox'::regnamespace AND p.proname ~ ('^_q' || :qid || '_late_') \gset

SELECT ok(:'late_fn' IS NOT NULL, 'create_queue makes the queue''s late-rows function');
SELECT ok(:'config'::text[] @> ARRAY['plan_cache_mode=force_generic_plan'], 'it keeps one plan for the session');
SELECT ok(:'config'::text[] @> ARRAY['enable_seqscan=off', 'enable_bitmapscan=off', 'jit=off'],
          'it pins the planner settings its plan is made under');

SET LOCAL plan_cache_mode = force_generic_plan;
SET LOCAL enable_seqscan = off;
SET LOCAL enable_bitmapscan = off;
SET LOCAL search_path = pg_catalog, pg_temp;
SELECT format('PREPARE late_stmt(text[], bigint[], bigint, bigint, bigint) AS %s', :'stmt') AS prep \gset
:prep;
CREATE TEMP TABLE late_plan (line text) ON COMMIT DROP;
DO $$
DECLARE
  r record;
BEGIN
  FOR r IN EXECUTE 'EXPLAIN (COSTS OFF) EXECUTE late_stmt(''{a}'', ''{1}'', 1, 1, 10)' LOOP
    INSERT INTO late_plan VALUES (r."QUERY PLAN");
  END LOOP;
END;
$$;
RESET search_path;
SELECT ok(EXISTS (SELECT 1 FROM late_plan WHERE line ~ 'Index Cond: \(\(id > \$4\) AND \(id <= \$5\)\)')
          AND NOT EXISTS (SELECT 1 FROM late_plan WHERE line ~ 'Seq Scan|Bitmap'),
          'its one plan reads one range of the primary key');
SELECT * FROM finish();
ROLLBACK;
