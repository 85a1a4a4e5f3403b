-- The name of alert alert_id, or NULL when there is no such alert. The engine reads it for the
-- messages of the steps it took (SELECT ..., alr.alert_name(t.alert_id) FROM alr.take_due_steps(...) t),
-- so the role that runs it needs no privilege on alr.alerts. Read-only. A NULL alert_id is refused
-- (22023), as every alr function refuses one.
CREATE OR REPLACE FUNCTION alr.alert_name(alert_id uuid)
RETURNS text
LANGUAGE plpgsql
STABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  v_name text;
BEGIN
  IF alert_name.alert_id IS NULL THEN
    PERFORM alr._invalid('alert_name', 'alert_id must not be NULL, got NULL');
  END IF;
  SELECT a.name INTO v_name FROM alr.alerts a WHERE a.id = alert_name.alert_id;
  RETURN v_name;
END;
$$;
