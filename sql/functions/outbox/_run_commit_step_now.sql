-- Runs this transaction's pending commit step now (SET CONSTRAINTS ... IMMEDIATE, then back to
-- DEFERRED), so that DDL on a queue table written in the same transaction (create_queue adopting
-- or re-creating triggers, drop_queue) does not fail with "pending trigger events". The commit
-- locks it takes are then held until the transaction ends, exactly as at COMMIT.
CREATE OR REPLACE FUNCTION outbox._run_commit_step_now(p_table regclass)
RETURNS void
LANGUAGE plpgsql
VOLATILE
SET search_path = ''
AS $$
DECLARE
  v_schema text;
BEGIN
  SELECT n.nspname INTO v_schema
  FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
  WHERE c.oid = p_table;
  IF EXISTS (SELECT 1 FROM pg_catalog.pg_constraint k
             WHERE k.connamespace = (SELECT n.oid FROM pg_catalog.pg_namespace n WHERE n.nspname = v_schema)
               AND k.conname = 'pgdrain_commit') THEN
    EXECUTE pg_catalog.format('SET CONSTRAINTS %I.pgdrain_commit IMMEDIATE', v_schema);
    EXECUTE pg_catalog.format('SET CONSTRAINTS %I.pgdrain_commit DEFERRED', v_schema);
  END IF;
END;
$$;
