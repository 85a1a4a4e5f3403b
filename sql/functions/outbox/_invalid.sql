-- Raises the package's argument error: SQLSTATE 22023, message '<function>: <what is wrong>'.
-- Every validation goes through here so that codes and message shapes stay one API.
CREATE OR REPLACE FUNCTION outbox._invalid(p_function text, p_message text)
RETURNS void
LANGUAGE plpgsql
IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
  RAISE EXCEPTION '%: %', p_function, p_message USING ERRCODE = '22023';
END;
$$;
