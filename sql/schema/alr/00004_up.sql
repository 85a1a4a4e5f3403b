-- The three pgdrain roles (cluster-wide, NOLOGIN), created only when missing: the same statement as
-- outbox/00002, because a service may migrate module alr without module outbox. A DBA may create
-- them beforehand when the migrating role lacks CREATEROLE; a concurrent creator simply wins.
DO $roles$
DECLARE
  v_role text;
BEGIN
  FOREACH v_role IN ARRAY ARRAY['pgdrain_worker', 'pgdrain_producer', 'pgdrain_operator'] LOOP
    IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_roles r WHERE r.rolname = v_role) THEN
      BEGIN
        EXECUTE pg_catalog.format('CREATE ROLE %I NOLOGIN', v_role);
      EXCEPTION WHEN duplicate_object OR unique_violation THEN
        NULL;
      END;
    END IF;
  END LOOP;
END
$roles$;
