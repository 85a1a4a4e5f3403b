-- batch_size must be 1..10000: a claim larger than that holds too many rows in one statement.
CREATE OR REPLACE FUNCTION outbox._check_batch_size(p_function text, p_batch_size integer)
RETURNS void
LANGUAGE plpgsql
IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
  IF p_batch_size IS NULL OR p_batch_size < 1 OR p_batch_size > 10000 THEN
    PERFORM outbox._invalid(p_function, pg_catalog.format(
      'batch_size must be between 1 and 10000, got %s', COALESCE(p_batch_size::text, 'NULL')));
  END IF;
END;
$$;
