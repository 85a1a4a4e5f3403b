-- A step recorded and never journaled (record, then deliver, then journal: an engine killed after
-- the record) was a page probably never sent, and nothing showed it. The ladder keeps when its
-- oldest such step was recorded, NULL when it has none; alr.unjournaled_steps lists those older
-- than a bound, through the partial index. Ladders with steps recorded and not yet journaled when
-- this migration runs count from now.
ALTER TABLE alr.alert_escalations ADD COLUMN unjournaled_since timestamptz;
COMMENT ON COLUMN alr.alert_escalations.unjournaled_since IS
  'When the oldest step of this ladder that apply_escalation recorded and record_delivery has not '
  'journaled yet was recorded; NULL when every recorded step is journaled. A step unjournaled for '
  'longer than its engine''s lease, delivery timeout and journal retries was probably never '
  'delivered (alr.unjournaled_steps).';
UPDATE alr.alert_escalations e SET unjournaled_since = pg_catalog.now()
WHERE EXISTS (SELECT 1 FROM pg_catalog.unnest(e.applied_tokens) AS t(token) WHERE t.token IS NOT NULL);
CREATE INDEX alert_escalations_unjournaled ON alr.alert_escalations (unjournaled_since)
  WHERE unjournaled_since IS NOT NULL;
