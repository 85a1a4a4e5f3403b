-- Raises the ladder's unknown-id error: SQLSTATE P0002 (no_data_found), message
-- '<function>: <argument> must name an existing <what>, got <id>'. Every unknown id uses it.
CREATE OR REPLACE FUNCTION alr._not_found(p_function text, p_argument text, p_what text, p_id uuid)
RETURNS void
LANGUAGE plpgsql
IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
  RAISE EXCEPTION '%: % must name an existing %, got %', p_function, p_argument, p_what, p_id
    USING ERRCODE = 'P0002';
END;
$$;
