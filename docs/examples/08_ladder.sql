-- The escalation ladder: a policy of steps, a firing alert, and the alert's ladder.
SELECT alr.create_policy('on-call', '[
  {"delay": "0 seconds", "channel": "telegram", "target": "@oncall"},
  {"delay": "5 minutes", "channel": "sms",      "target": "+15550100"}]') AS policy_id \gset
SELECT alr.add_alert('api 5xx above 2%') AS alert_id \gset
SELECT alr.start_escalation(:'alert_id', :'policy_id');

-- An engine takes the due steps, each leased with its own token; it records, then delivers.
SELECT escalation_id, step_idx, channel, target, lease_token
FROM alr.take_due_steps(batch_size => 100, lease => '2 minutes') \gset
SELECT alr.apply_escalation(:'escalation_id', :'lease_token');  -- true: deliver it, once
-- ... send the Telegram message here, then journal the delivery ...
SELECT alr.record_delivery(:'escalation_id', :step_idx, :'lease_token');

-- Resolving the alert stops its ladder: the sms step is never taken.
SELECT alr.resolve_alert(:'alert_id');
