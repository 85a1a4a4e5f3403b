-- The three roles of the outbox (cluster-wide, NOLOGIN: grant them to your login roles).
-- Created only when missing, so a second database on the same cluster (or a DBA who created them
-- beforehand, when the migrating role lacks CREATEROLE) is fine; two databases migrating at once
-- race on pg_authid's unique index, and the loser simply finds the role there.
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
