-- Refuses, before anything changes, a caller of create_queue or set_notify whose objects the role
-- pgdrain's SECURITY DEFINER functions run as (the owner of the outbox functions) may not use: what
-- those calls make (the queue table, its sequences in outbox, its triggers' functions) is the
-- caller's, and with a superuser DBA beside a non-superuser migrating role (as docs/security.md
-- advises) every producer's INSERT and every claim of the queue failed with 42501 "permission
-- denied for sequence ...". 42501, naming the role to run the call as. Returns that owner (what
-- create_queue judges row level security for).
CREATE OR REPLACE FUNCTION outbox._check_caller(p_function text)
RETURNS oid
LANGUAGE plpgsql
STABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  v_definer constant oid := (SELECT p.proowner FROM pg_catalog.pg_proc p
                             WHERE p.oid = 'outbox.claim_batch(text,integer,interval)'::pg_catalog.regprocedure);
BEGIN
  IF NOT pg_catalog.pg_has_role(v_definer, current_user, 'USAGE') THEN
    RAISE EXCEPTION '%: run it as the role pgdrain''s functions run as (%), got %: what it makes would be %''s, which % may not use (every producer and claim of the queue would fail with permission denied)',
      p_function, pg_catalog.pg_get_userbyid(v_definer), current_user, current_user, pg_catalog.pg_get_userbyid(v_definer)
      USING ERRCODE = '42501', HINT = pg_catalog.format('SET ROLE %I, then call %s again.', pg_catalog.pg_get_userbyid(v_definer), p_function);
  END IF;
  RETURN v_definer;
END;
$$;
