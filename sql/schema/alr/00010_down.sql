-- Back to 00009: the journal is not fenced by the token (record_delivery as before).
ALTER TABLE alr.alert_escalations DROP COLUMN applied_tokens;
