-- Functions made by generators before this migration (each partitioned queue's heads trigger, its
-- late-rows function, the kept statements of outbox._prepared) search pg_catalog, then pg_temp, as
-- every function above now does: with search_path = '' PostgreSQL still searches the session's
-- temporary schema first for types and relations, so a caller's temporary domain named text or
-- regclass ran its CHECK as the owner of a SECURITY DEFINER function (docs/security.md).
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
