-- Canonical 'schema.table' for a queue argument. Only plain names are accepted (letters, digits,
-- underscores; folded to lower case like unquoted SQL); an unqualified name means schema public.
CREATE OR REPLACE FUNCTION outbox._queue_name(p_function text, p_queue text)
RETURNS text
LANGUAGE plpgsql
IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  v_parts text[];
BEGIN
  IF p_queue IS NULL THEN
    PERFORM outbox._invalid(p_function, 'queue must not be NULL');
  END IF;
  IF p_queue !~ E'^[A-Za-z_][A-Za-z0-9_]{0,62}(\\.[A-Za-z_][A-Za-z0-9_]{0,62})?$' THEN
    PERFORM outbox._invalid(p_function, pg_catalog.format(
      'queue must be a plain name "schema.table" (letters, digits, _), got %L', p_queue));
  END IF;
  v_parts := pg_catalog.string_to_array(pg_catalog.lower(p_queue), '.');
  IF pg_catalog.array_length(v_parts, 1) = 1 THEN
    v_parts := ARRAY['public', v_parts[1]];
  END IF;
  RETURN v_parts[1] || '.' || v_parts[2];
END;
$$;
