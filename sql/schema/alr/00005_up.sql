-- The console's read-only role (also made by outbox 00010; whichever module migrates first makes it)
-- reads the ladders, and operators may resolve an alert (issue 16).
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
