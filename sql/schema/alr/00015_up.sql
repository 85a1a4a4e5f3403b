-- Steps left unjournaled on ladders of alerts that are resolved or acknowledged no longer matter
-- (nobody is paged for them: alr.unjournaled_steps leaves them out), and kept in the partial index
-- they made its reads grow with every such step ever left. resolve_alert and acknowledge_alert now
-- clear them; this clears those of alerts handled before.
COMMENT ON COLUMN alr.alert_escalations.unjournaled_since IS
  'When the oldest step of this ladder that apply_escalation recorded and record_delivery has not '
  'journaled yet was recorded; NULL when every recorded step is journaled, or once the alert is '
  'resolved or acknowledged. A step unjournaled for longer than its engine''s lease, delivery '
  'timeout and journal retries was probably never delivered (alr.unjournaled_steps).';
UPDATE alr.alert_escalations e SET unjournaled_since = NULL
WHERE e.unjournaled_since IS NOT NULL
  AND (EXISTS (SELECT 1 FROM alr.alerts a WHERE a.id = e.alert_id AND a.state <> 'firing')
       OR EXISTS (SELECT 1 FROM alr.alert_acknowledgements k WHERE k.alert_id = e.alert_id));
