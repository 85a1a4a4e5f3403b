-- Undoes the 0.1.0 baseline of module alr. The pgdrain_* roles stay: they are cluster-wide, and
-- other databases (and module outbox) may still use them.
DROP SCHEMA alr CASCADE;
DROP FUNCTION IF EXISTS core.new_id();
-- core may be shared by other modules: drop it only when nothing else lives in it.
DO $$
BEGIN
  IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_depend d
                 WHERE d.refclassid = 'pg_catalog.pg_namespace'::pg_catalog.regclass
                   AND d.refobjid = (SELECT n.oid FROM pg_catalog.pg_namespace n WHERE n.nspname = 'core')) THEN
    DROP SCHEMA IF EXISTS core;
  END IF;
END;
$$;
