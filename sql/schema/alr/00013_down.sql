DROP FUNCTION alr.unjournaled_steps(interval);
DROP INDEX alr.alert_escalations_unjournaled;
ALTER TABLE alr.alert_escalations DROP COLUMN unjournaled_since;
