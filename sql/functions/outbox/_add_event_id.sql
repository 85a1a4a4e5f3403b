-- Gives a queue table its event_id column (the event's stable identity, DESIGN "Identity and order
-- of an event") when it has none: nullable and with a default for new rows, so adding it is a
-- catalog change, not a rewrite of a large table under an exclusive lock. Rows written before have
-- NULL, and the claims hand out a uuid derived from the queue and id instead (outbox._event_id_of).
-- An existing column of another type is refused.
CREATE OR REPLACE FUNCTION outbox._add_event_id(p_rel regclass)
RETURNS void
LANGUAGE plpgsql
VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  v_type text;
  v_default text;
BEGIN
  SELECT pg_catalog.format_type(a.atttypid, a.atttypmod), pg_catalog.pg_get_expr(d.adbin, d.adrelid)
    INTO v_type, v_default
  FROM pg_catalog.pg_attribute a
  LEFT JOIN pg_catalog.pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
  WHERE a.attrelid = p_rel AND a.attname = 'event_id' AND NOT a.attisdropped;
  IF NOT FOUND THEN
    EXECUTE pg_catalog.format('ALTER TABLE %s ADD COLUMN event_id uuid', p_rel);
  ELSIF v_type <> 'uuid' THEN
    PERFORM outbox._invalid('create_queue', pg_catalog.format(
      'queue table %s has an event_id column of type %s; pgdrain needs uuid (the event''s stable identity)', p_rel, v_type));
  END IF;
  IF v_default IS NULL THEN
    EXECUTE pg_catalog.format('ALTER TABLE %s ALTER COLUMN event_id SET DEFAULT pg_catalog.gen_random_uuid()', p_rel);
  END IF;
END;
$$;
