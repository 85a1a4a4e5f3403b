-- Late-rows functions made before this migration (outbox._late_rows_function) plan their statement
-- once per session from now on, under the planner settings they pin, as the ones it makes now do.
DO $$
DECLARE
  v_fn regprocedure;
BEGIN
  FOR v_fn IN SELECT p.oid::regprocedure FROM pg_catalog.pg_proc p
              WHERE p.pronamespace = 'outbox'::regnamespace AND p.proname ~ '^_q[0-9]+_late_'
              ORDER BY p.oid LOOP
    EXECUTE pg_catalog.format('ALTER FUNCTION %s SET plan_cache_mode = force_generic_plan', v_fn);
    EXECUTE pg_catalog.format('ALTER FUNCTION %s SET enable_seqscan = off', v_fn);
    EXECUTE pg_catalog.format('ALTER FUNCTION %s SET enable_bitmapscan = off', v_fn);
    EXECUTE pg_catalog.format('ALTER FUNCTION %s SET jit = off', v_fn);
  END LOOP;
END;
$$;
