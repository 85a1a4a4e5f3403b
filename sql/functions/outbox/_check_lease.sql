-- A lease must be positive and at most one day: longer leases only hide crashed workers.
CREATE OR REPLACE FUNCTION outbox._check_lease(p_function text, p_lease interval)
RETURNS void
LANGUAGE plpgsql
IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
  PERFORM outbox._check_span(p_function, 'lease', p_lease);
  IF p_lease IS NULL OR p_lease <= interval '0' OR p_lease > interval '1 day' THEN
    PERFORM outbox._invalid(p_function, pg_catalog.format(
      'lease must be greater than 0 and at most 1 day, got %s', COALESCE(p_lease::text, 'NULL')));
  END IF;
END;
$$;
