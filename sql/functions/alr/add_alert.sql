-- Convenience: a new firing alert named `name`; returns its id. A plain INSERT INTO alr.alerts
-- (name) is equally valid: state defaults to 'firing'. The name is the message's text: not blank
-- (alr._is_blank), at most 1000 characters.
CREATE OR REPLACE FUNCTION alr.add_alert(name text)
RETURNS uuid
LANGUAGE plpgsql
VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  v_id uuid;
BEGIN
  -- The length first: a blank name over the cap is not echoed whole in the error.
  IF pg_catalog.length(add_alert.name) > 1000 THEN
    PERFORM alr._invalid('add_alert', pg_catalog.format('name must be at most 1000 characters, got %s characters',
      pg_catalog.length(add_alert.name)));
  END IF;
  IF add_alert.name IS NULL OR alr._is_blank(add_alert.name) THEN
    PERFORM alr._invalid('add_alert', pg_catalog.format('name must be a non-empty text, got %s',
      COALESCE(pg_catalog.quote_literal(add_alert.name), 'NULL')));
  END IF;
  INSERT INTO alr.alerts (id, name) VALUES (core.new_id(), add_alert.name) RETURNING id INTO v_id;
  RETURN v_id;
END;
$$;
