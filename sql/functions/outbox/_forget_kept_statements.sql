-- Drops every queue's kept statements (the functions outbox._prepared makes, _q<queue_id>_<hash>)
-- and returns how many: each is made again by the first call that needs it. A kept statement is
-- named for its text, so one a migration changed is never called again but stays until drop_queue;
-- a migration that changes statements calls this in its after-step. A claim that looked one up
-- just before it was dropped fails once ("function does not exist") and is retried by its drainer.
CREATE OR REPLACE FUNCTION outbox._forget_kept_statements()
RETURNS integer
LANGUAGE plpgsql
VOLATILE
SET search_path = ''
AS $$
DECLARE
  v_fn regprocedure;
  v_dropped integer := 0;
BEGIN
  FOR v_fn IN
    SELECT p.oid::regprocedure FROM pg_catalog.pg_proc p
    WHERE p.pronamespace = 'outbox'::regnamespace AND p.proname ~ '^_q[0-9]+_[0-9a-f]{24}$'
  LOOP
    EXECUTE pg_catalog.format('DROP FUNCTION %s', v_fn);
    v_dropped := v_dropped + 1;
  END LOOP;
  RETURN v_dropped;
END;
$$;
