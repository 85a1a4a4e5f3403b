-- Convenience: a new firing alert named `name`; returns its id. A plain INSERT INTO alr.alerts
-- (name) is equally valid: state defaults to 'firing'.
CREATE OR REPLACE FUNCTION alr.add_alert(name text)
RETURNS uuid
LANGUAGE plpgsql
VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  v_id uuid;
BEGIN
  IF add_alert.name IS NULL OR add_alert.name !~ '[^[:space:]\u00a0\u200b\ufeff]' THEN
    PERFORM alr._invalid('add_alert', pg_catalog.format('name must be a non-empty text, got %s',
      COALESCE(pg_catalog.quote_literal(add_alert.name), 'NULL')));
  END IF;
  INSERT INTO alr.alerts (id, name) VALUES (core.new_id(), add_alert.name) RETURNING id INTO v_id;
  RETURN v_id;
END;
$$;
