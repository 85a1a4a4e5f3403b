DROP FUNCTION alr.record_delivery(uuid, integer, uuid, text);
DROP TABLE alr.delivery_journal;
COMMENT ON COLUMN alr.alert_escalations.stop_reason IS NULL;
