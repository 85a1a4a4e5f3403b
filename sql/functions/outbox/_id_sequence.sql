-- The sequence a queue table's id comes from, or NULL: the identity's sequence, or the one sequence
-- a default of exactly nextval('that_sequence') uses (serial, or a sequence that is not OWNED BY the
-- column: found through the default's dependency in pg_depend, which pg_get_serial_sequence does not
-- follow). Only an ascending sequence counts. The commit step renumbers late rows with nextval of
-- it (outbox.queues.id_sequence), so a partitioned queue needs one (create_queue refuses otherwise).
CREATE OR REPLACE FUNCTION outbox._id_sequence(p_rel regclass)
RETURNS regclass
LANGUAGE plpgsql
STABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  v_attnum smallint;
  v_identity "char";
  v_seq regclass;
  v_expr text;
BEGIN
  SELECT a.attnum, a.attidentity INTO v_attnum, v_identity
  FROM pg_catalog.pg_attribute a
  WHERE a.attrelid = p_rel AND a.attname = 'id' AND NOT a.attisdropped;
  IF NOT FOUND THEN
    RETURN NULL;
  END IF;
  IF v_identity <> '' THEN
    v_seq := pg_catalog.pg_get_serial_sequence(p_rel::text, 'id')::regclass;
  ELSE
    SELECT d.refobjid::regclass, pg_catalog.pg_get_expr(ad.adbin, ad.adrelid) INTO v_seq, v_expr
    FROM pg_catalog.pg_attrdef ad
    JOIN pg_catalog.pg_depend d ON d.classid = 'pg_catalog.pg_attrdef'::regclass AND d.objid = ad.oid
                               AND d.refclassid = 'pg_catalog.pg_class'::regclass
    JOIN pg_catalog.pg_class s ON s.oid = d.refobjid AND s.relkind = 'S'
    WHERE ad.adrelid = p_rel AND ad.adnum = v_attnum
    ORDER BY d.refobjid
    LIMIT 1;
    -- Anything but a bare nextval of it (nextval(...) * 2, coalesce of two sequences) does not
    -- give ids in the sequence's order.
    IF v_expr IS DISTINCT FROM pg_catalog.format('nextval(%L::regclass)', v_seq::text) THEN
      v_seq := NULL;
    END IF;
  END IF;
  IF v_seq IS NOT NULL AND NOT EXISTS (
      SELECT 1 FROM pg_catalog.pg_sequence s WHERE s.seqrelid = v_seq AND s.seqincrement > 0) THEN
    v_seq := NULL;
  END IF;
  RETURN v_seq;
END;
$$;
