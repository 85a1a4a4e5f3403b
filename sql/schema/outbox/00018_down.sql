-- The statements with kept plans every queue made (outbox._prepared), and the function that made them.
DO $$
DECLARE
  v_fn regprocedure;
BEGIN
  FOR v_fn IN
    SELECT p.oid::regprocedure FROM pg_catalog.pg_proc p
    WHERE p.pronamespace = 'outbox'::regnamespace AND p.proname ~ '^_q[0-9]+_[0-9a-f]+$'
  LOOP
    EXECUTE pg_catalog.format('DROP FUNCTION %s', v_fn);
  END LOOP;
END;
$$;
DROP FUNCTION outbox._prepared(integer, text, text, text);
