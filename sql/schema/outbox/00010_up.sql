-- What the operator console needs (issue 16): a read-only role, a bounded list of poisoned rows,
-- and a way for an operator to end a stuck lease.
DO $roles$
BEGIN
  IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_roles r WHERE r.rolname = 'pgdrain_reader') THEN
    BEGIN
      CREATE ROLE pgdrain_reader NOLOGIN;
    EXCEPTION WHEN duplicate_object OR unique_violation THEN
      NULL;
    END;
  END IF;
END
$roles$;
