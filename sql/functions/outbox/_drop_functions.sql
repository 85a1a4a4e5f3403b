-- Drops every function of schema outbox whose name matches the regular expression p_name (the
-- functions made per queue: kept statements, late-rows functions, a dropped queue's all) and
-- returns how many.
CREATE OR REPLACE FUNCTION outbox._drop_functions(p_name text)
RETURNS integer
LANGUAGE plpgsql
VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  v_fn regprocedure;
  v_dropped integer := 0;
BEGIN
  FOR v_fn IN
    SELECT p.oid::regprocedure FROM pg_catalog.pg_proc p
    WHERE p.pronamespace = 'outbox'::regnamespace AND p.proname ~ p_name
  LOOP
    EXECUTE pg_catalog.format('DROP FUNCTION %s', v_fn);
    v_dropped := v_dropped + 1;
  END LOOP;
  RETURN v_dropped;
END;
$$;
