-- A JSON argument as an error message shows it: whole when short, else its first 200 characters and
-- its length (an array of steps over the cap by its count), so that a mistaken megabyte is not
-- echoed back into the error and the server log. NULL for NULL.
CREATE OR REPLACE FUNCTION alr._shown(p_value jsonb)
RETURNS text
LANGUAGE sql
IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$
  SELECT CASE
    WHEN pg_catalog.jsonb_typeof(p_value) = 'array' AND pg_catalog.jsonb_array_length(p_value) > 100
      THEN pg_catalog.format('an array of %s elements', pg_catalog.jsonb_array_length(p_value))
    WHEN pg_catalog.length(p_value::text) > 200
      THEN pg_catalog.format('%s... (%s characters)', pg_catalog.left(p_value::text, 200), pg_catalog.length(p_value::text))
    ELSE p_value::text
  END;
$$;
