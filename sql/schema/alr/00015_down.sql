COMMENT ON COLUMN alr.alert_escalations.unjournaled_since IS
  'When the oldest step of this ladder that apply_escalation recorded and record_delivery has not '
  'journaled yet was recorded; NULL when every recorded step is journaled. A step unjournaled for '
  'longer than its engine''s lease, delivery timeout and journal retries was probably never '
  'delivered (alr.unjournaled_steps).';
