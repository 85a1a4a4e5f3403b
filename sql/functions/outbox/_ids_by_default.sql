-- Gives the rows with the given ids (of a queue table whose id is GENERATED ALWAYS AS IDENTITY)
-- new ids from the identity, one row after the other in the given order, and returns them aligned
-- with p_ids. Such an id can only be written as DEFAULT (428C9 otherwise), and a DEFAULT in one
-- statement over many rows is drawn in whatever order the plan visits them: row by row keeps the
-- order, which is what renumbering is for. Only late rows and requeued rows of such tables come here.
CREATE OR REPLACE FUNCTION outbox._ids_by_default(p_rel regclass, p_ids bigint[])
RETURNS bigint[]
LANGUAGE plpgsql
VOLATILE
SET search_path = pg_catalog, pg_temp
SET enable_seqscan = off
SET jit = off
AS $$
DECLARE
  v_update constant text := pg_catalog.format('UPDATE %s t SET id = DEFAULT WHERE t.id = $1 RETURNING t.id', p_rel);
  v_new bigint[] := '{}';
  v_id bigint;
BEGIN
  FOR i IN 1..COALESCE(pg_catalog.cardinality(p_ids), 0) LOOP
    EXECUTE v_update INTO v_id USING p_ids[i];
    v_new := v_new || v_id;
  END LOOP;
  RETURN v_new;
END;
$$;
