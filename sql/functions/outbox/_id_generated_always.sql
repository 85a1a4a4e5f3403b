-- Whether the queue table's id is GENERATED ALWAYS AS IDENTITY: such an id takes only DEFAULT in
-- an UPDATE, so renumbering (late rows, requeued rows) draws its new ids through the identity
-- (outbox._ids_by_default).
CREATE OR REPLACE FUNCTION outbox._id_generated_always(p_rel regclass)
RETURNS boolean
LANGUAGE sql
STABLE
SET search_path = pg_catalog, pg_temp
AS $$
  SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_attribute a
                 WHERE a.attrelid = p_rel AND a.attname = 'id' AND a.attidentity = 'a');
$$;
