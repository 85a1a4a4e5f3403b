-- Validates an operator's reason for an action on rows: a text of at most 1000 characters that is
-- not only white space (outbox._is_blank: any Unicode space, line break, zero-width space), recorded in
-- the row's last_error and in outbox.operator_actions.
CREATE OR REPLACE FUNCTION outbox._check_reason(p_function text, p_reason text)
RETURNS void
LANGUAGE plpgsql
IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
  IF p_reason IS NULL OR outbox._is_blank(p_reason) OR pg_catalog.length(p_reason) > 1000 THEN
    PERFORM outbox._invalid(p_function, pg_catalog.format(
      'reason must be a non-blank text of at most 1000 characters, got %s',
      COALESCE(pg_catalog.quote_literal(pg_catalog.left(p_reason, 50)), 'NULL')));
  END IF;
END;
$$;
