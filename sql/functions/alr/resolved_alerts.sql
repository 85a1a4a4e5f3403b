-- The most recently resolved alerts, newest first, at most max_rows (1..1000), through the partial
-- index alerts_resolved so the cost follows the rows returned: when each fired, who acknowledged it
-- and when (NULL if nobody did), when it was resolved, and how many of its ladders' steps were
-- delivered (the journal). For the console's history and for dashboards (pgdrain_reader).
CREATE OR REPLACE FUNCTION alr.resolved_alerts(max_rows integer DEFAULT 50)
RETURNS TABLE(alert_id uuid, name text, created_at timestamptz, acknowledged_at timestamptz,
              acknowledged_by text, note text, resolved_at timestamptz, steps_delivered bigint)
LANGUAGE plpgsql
STABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  fn constant text := 'resolved_alerts';
BEGIN
  IF resolved_alerts.max_rows IS NULL OR resolved_alerts.max_rows < 1 OR resolved_alerts.max_rows > 1000 THEN
    PERFORM alr._invalid(fn, pg_catalog.format('max_rows must be between 1 and 1000, got %s',
      COALESCE(resolved_alerts.max_rows::text, 'NULL')));
  END IF;
  RETURN QUERY
  SELECT a.id, a.name, a.created_at, k.acknowledged_at, k.acknowledged_by, k.note, a.resolved_at,
         (SELECT pg_catalog.count(*) FROM alr.alert_escalations e
          JOIN alr.delivery_journal j ON j.escalation_id = e.id
          WHERE e.alert_id = a.id AND j.outcome = 'delivered')
  FROM alr.alerts a
  LEFT JOIN alr.alert_acknowledgements k ON k.alert_id = a.id
  WHERE a.state = 'resolved'
  ORDER BY a.resolved_at DESC, a.id DESC
  LIMIT resolved_alerts.max_rows;
END;
$$;
