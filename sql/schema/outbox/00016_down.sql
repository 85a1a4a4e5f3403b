-- Back to 00015: claims without shared hints (each session searches from the front once a second).
DO $$
DECLARE
  r record;
BEGIN
  FOR r IN SELECT c.oid::regclass AS seq FROM pg_catalog.pg_class c
           WHERE c.relnamespace = 'outbox'::regnamespace AND c.relkind = 'S'
             AND (c.relname LIKE 'claim\_start\_q%' OR c.relname LIKE 'claim\_front\_q%') LOOP
    EXECUTE pg_catalog.format('DROP SEQUENCE %s', r.seq);
  END LOOP;
END;
$$;
DROP FUNCTION outbox._install_claim_hints(outbox.queues);
