-- Validates the retry_at argument of apply_result(s) and settle_locked: a caller-chosen time for a
-- row's next attempt (a peer's Retry-After), given only with the outcome 'transient', finite. NULL
-- (the whole array, or one element) keeps the queue's exponential backoff.
CREATE OR REPLACE FUNCTION outbox._check_retry_at(p_function text, p_ids bigint[], p_outcomes text[],
                                                  p_retry_at timestamptz[])
RETURNS void
LANGUAGE plpgsql
IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  v_bad integer;
  v_where text;
BEGIN
  IF p_retry_at IS NULL THEN
    RETURN;
  END IF;
  PERFORM outbox._check_one_dimension(p_function, 'retry_at', pg_catalog.array_ndims(p_retry_at));
  IF pg_catalog.cardinality(p_retry_at) <> pg_catalog.cardinality(p_ids) THEN
    PERFORM outbox._invalid(p_function, pg_catalog.format(
      'retry_at must be NULL or have as many elements as ids (%s), got %s',
      pg_catalog.cardinality(p_ids), pg_catalog.cardinality(p_retry_at)));
  END IF;
  SELECT u.n INTO v_bad FROM unnest(p_retry_at, p_outcomes) WITH ORDINALITY AS u(at, outcome, n)
  WHERE u.at IS NOT NULL AND u.outcome IS DISTINCT FROM 'transient' LIMIT 1;
  IF FOUND THEN
    -- apply_result takes one row: no element to name.
    v_where := CASE WHEN p_function = 'apply_result' THEN '' ELSE pg_catalog.format(' (element %s)', v_bad) END;
    PERFORM outbox._invalid(p_function, pg_catalog.format(
      'retry_at must be NULL unless the outcome is ''transient''%s', v_where));
  END IF;
  SELECT u.n INTO v_bad FROM unnest(p_retry_at) WITH ORDINALITY AS u(at, n)
  WHERE u.at IN ('infinity', '-infinity') LIMIT 1;
  IF FOUND THEN
    v_where := CASE WHEN p_function = 'apply_result' THEN '' ELSE pg_catalog.format(' (element %s)', v_bad) END;
    PERFORM outbox._invalid(p_function, pg_catalog.format(
      'retry_at must be a finite time%s', v_where));
  END IF;
END;
$$;
