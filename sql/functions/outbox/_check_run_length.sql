-- run_length must be 1..1000: how many rows of one partition a claim takes (1 = the seed's claim).
CREATE OR REPLACE FUNCTION outbox._check_run_length(p_function text, p_run_length integer)
RETURNS void
LANGUAGE plpgsql
IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
  IF p_run_length IS NULL OR p_run_length < 1 OR p_run_length > 1000 THEN
    PERFORM outbox._invalid(p_function, pg_catalog.format(
      'run_length must be between 1 and 1000, got %s', COALESCE(p_run_length::text, 'NULL')));
  END IF;
END;
$$;
