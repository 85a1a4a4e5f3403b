-- Acknowledgement (issue 32 item 1): someone on call has taken an alert. alr.acknowledge_alert
-- writes one row here per alert (the first acknowledgement is kept) and stops the alert's running
-- ladders with stop_reason 'acknowledged', so no further step pages anyone; the alert stays firing
-- until resolve_alert. Written only by acknowledge_alert (SECURITY DEFINER); read by the console.
CREATE TABLE alr.alert_acknowledgements (
  alert_id uuid PRIMARY KEY REFERENCES alr.alerts (id) ON DELETE CASCADE,
  acknowledged_at timestamptz NOT NULL DEFAULT pg_catalog.now(),
  acknowledged_by text NOT NULL DEFAULT session_user,
  note text CHECK (note IS NULL OR (pg_catalog.btrim(note) <> '' AND pg_catalog.length(note) <= 1000))
);
COMMENT ON TABLE alr.alert_acknowledgements IS
  'Who acknowledged a firing alert and when (alr.acknowledge_alert): its ladders stopped, it stays firing until resolved.';
COMMENT ON COLUMN alr.alert_acknowledgements.acknowledged_by IS
  'The login role that acknowledged (session_user); a shared login (a console) names the person in note.';

ALTER TABLE alr.alert_escalations DROP CONSTRAINT alert_escalations_stop_reason_check;
ALTER TABLE alr.alert_escalations ADD CONSTRAINT alert_escalations_stop_reason_check
  CHECK (stop_reason IN ('resolved', 'completed', 'acknowledged'));
COMMENT ON COLUMN alr.alert_escalations.stop_reason IS
  'Why the ladder stopped: resolved (resolve_alert), completed (its last step was recorded) or '
  'acknowledged (acknowledge_alert: someone is on it, no further step).';

-- The recently resolved alerts, newest first (alr.resolved_alerts): the scan stops after the rows shown.
CREATE INDEX alerts_resolved ON alr.alerts (resolved_at DESC, id DESC) WHERE state = 'resolved';
