-- Raises the package's argument error: SQLSTATE 22023, message '<function>: <what is wrong>'.
-- Every validation goes through here so that codes and message shapes stay one API.
CREATE OR REPLACE FUNCTION outbox._invalid(p_function text, p_message text)
RETURNS void
LANGUAGE plpgsql
IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
  -- A message that quotes a huge argument (a 1 MB queue name or outcome) is cut: the rule comes
  -- first in every message, and the client and the server log get 1,000 characters, not megabytes.
  RAISE EXCEPTION '%: %', p_function,
    CASE WHEN pg_catalog.length(p_message) > 1000
         THEN pg_catalog.left(p_message, 1000) || pg_catalog.format('... (%s characters in all)', pg_catalog.length(p_message))
         ELSE p_message END
    USING ERRCODE = '22023';
END;
$$;
