-- Back to 00004. The role stays: it is cluster-wide and other databases may use it.
REVOKE SELECT ON alr.alerts, alr.escalation_policies, alr.escalation_steps, alr.alert_escalations,
  alr.delivery_journal FROM pgdrain_reader;
REVOKE USAGE ON SCHEMA alr FROM pgdrain_reader;
REVOKE EXECUTE ON FUNCTION alr.resolve_alert(uuid) FROM pgdrain_operator;
