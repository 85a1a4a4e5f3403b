-- An array argument must be one-dimensional (or empty, or NULL: other checks decide about those).
-- A multidimensional array would be flattened by unnest() and refused by array_position() with a
-- raw 0A000, so it is refused here, naming the argument. Takes array_ndims() of the argument, so
-- one function serves arrays of every type.
CREATE OR REPLACE FUNCTION outbox._check_one_dimension(p_function text, p_argument text, p_ndims integer)
RETURNS void
LANGUAGE plpgsql
IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
  IF p_ndims > 1 THEN
    PERFORM outbox._invalid(p_function, pg_catalog.format(
      '%s must be a one-dimensional array, got %s dimensions', p_argument, p_ndims));
  END IF;
END;
$$;
