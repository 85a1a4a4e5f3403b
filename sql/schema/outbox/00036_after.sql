-- Functions an older session still made with search_path = '' while 00030 ran (kept statements,
-- late-rows functions: its calls in flight finished with the old code) are pinned as 00030 pinned
-- the rest, and the kept statements are dropped: their names changed with this migration
-- (outbox._prepared, outbox._late_rows_function), so none made by old code is called again.
DO $$
DECLARE
  v_fn regprocedure;
BEGIN
  FOR v_fn IN SELECT p.oid::regprocedure FROM pg_catalog.pg_proc p
              WHERE p.pronamespace = 'outbox'::regnamespace AND 'search_path=""' = ANY (p.proconfig)
              ORDER BY p.oid LOOP
    EXECUTE pg_catalog.format('ALTER FUNCTION %s SET search_path = pg_catalog, pg_temp', v_fn);
  END LOOP;
END;
$$;
SELECT outbox._forget_kept_statements();
