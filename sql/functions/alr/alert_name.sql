-- The name of alert alert_id, or NULL when there is no such alert. The engine reads it for the
-- messages of the steps it took (SELECT ..., alr.alert_name(t.alert_id) FROM alr.take_due_steps(...) t),
-- so the role that runs it needs no privilege on alr.alerts. Read-only.
CREATE OR REPLACE FUNCTION alr.alert_name(alert_id uuid)
RETURNS text
LANGUAGE sql
STABLE
SET search_path = pg_catalog, pg_temp
AS $$
  SELECT a.name FROM alr.alerts a WHERE a.id = alert_name.alert_id;
$$;
