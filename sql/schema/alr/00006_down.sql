-- Back to 00005. A ladder stopped by an acknowledgement is recorded as resolved (the nearest
-- reason 00005 knows: a person ended it); the acknowledgements themselves are dropped.
DROP FUNCTION alr.acknowledge_alert(uuid, text);
DROP FUNCTION alr.resolved_alerts(integer);
DROP INDEX alr.alerts_resolved;
UPDATE alr.alert_escalations SET stop_reason = 'resolved' WHERE stop_reason = 'acknowledged';
ALTER TABLE alr.alert_escalations DROP CONSTRAINT alert_escalations_stop_reason_check;
ALTER TABLE alr.alert_escalations ADD CONSTRAINT alert_escalations_stop_reason_check
  CHECK (stop_reason IN ('resolved', 'completed'));
COMMENT ON COLUMN alr.alert_escalations.stop_reason IS
  'Why the ladder stopped: resolved (resolve_alert) or completed (its last step was recorded).';
DROP TABLE alr.alert_acknowledgements;
DROP FUNCTION alr.version();
