-- Validates the parallel arrays of a batch of results: one-dimensional, same lengths, at most
-- 10000, no NULL or duplicate id, every outcome one of 'sent', 'transient', 'permanent'.
CREATE OR REPLACE FUNCTION outbox._check_outcomes(p_function text, p_ids bigint[], p_outcomes text[],
                                                  p_errors text[])
RETURNS void
LANGUAGE plpgsql
IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  v_bad text;
  v_n bigint;
BEGIN
  IF p_ids IS NULL THEN
    PERFORM outbox._invalid(p_function, 'ids must not be NULL');
  END IF;
  PERFORM outbox._check_one_dimension(p_function, 'ids', pg_catalog.array_ndims(p_ids));
  PERFORM outbox._check_one_dimension(p_function, 'outcomes', pg_catalog.array_ndims(p_outcomes));
  PERFORM outbox._check_one_dimension(p_function, 'errors', pg_catalog.array_ndims(p_errors));
  IF pg_catalog.cardinality(p_ids) > 10000 THEN
    PERFORM outbox._invalid(p_function, pg_catalog.format(
      'ids must have at most 10000 elements, got %s', pg_catalog.cardinality(p_ids)));
  END IF;
  IF p_outcomes IS NULL OR pg_catalog.cardinality(p_outcomes) <> pg_catalog.cardinality(p_ids) THEN
    PERFORM outbox._invalid(p_function, pg_catalog.format(
      'outcomes must have as many elements as ids (%s), got %s', pg_catalog.cardinality(p_ids),
      COALESCE(pg_catalog.cardinality(p_outcomes)::text, 'NULL')));
  END IF;
  IF p_errors IS NOT NULL AND pg_catalog.cardinality(p_errors) <> pg_catalog.cardinality(p_ids) THEN
    PERFORM outbox._invalid(p_function, pg_catalog.format(
      'errors must be NULL or have as many elements as ids (%s), got %s',
      pg_catalog.cardinality(p_ids), pg_catalog.cardinality(p_errors)));
  END IF;
  IF pg_catalog.array_position(p_ids, NULL) IS NOT NULL THEN
    PERFORM outbox._invalid(p_function, 'ids must not contain NULL');
  END IF;
  IF (SELECT pg_catalog.count(DISTINCT x) FROM pg_catalog.unnest(p_ids) x) <> pg_catalog.cardinality(p_ids) THEN
    PERFORM outbox._invalid(p_function, 'ids must be distinct');
  END IF;
  SELECT u.o, u.n INTO v_bad, v_n FROM pg_catalog.unnest(p_outcomes) WITH ORDINALITY AS u(o, n)
  WHERE u.o IS NULL OR u.o NOT IN ('sent', 'transient', 'permanent') LIMIT 1;
  IF FOUND THEN
    -- Named as the caller knows it: apply_result's one outcome, or an element of outcomes.
    PERFORM outbox._invalid(p_function, CASE WHEN p_function = 'apply_result'
      THEN pg_catalog.format('outcome must be ''sent'', ''transient'' or ''permanent'', got %s',
                             COALESCE(pg_catalog.quote_literal(v_bad), 'NULL'))
      ELSE pg_catalog.format('outcomes must hold only ''sent'', ''transient'' or ''permanent'', got %s (element %s)',
                             COALESCE(pg_catalog.quote_literal(v_bad), 'NULL'), v_n) END);
  END IF;
END;
$$;
