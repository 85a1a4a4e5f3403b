-- Gives every alr function back to PUBLIC as security invoker, as before 00004, and drops the two
-- functions 00004 added. The roles stay: they are cluster-wide and the outbox (or other databases)
-- may use them.
DROP FUNCTION alr.alert_name(uuid);
DROP FUNCTION alr.channels_in_use();
ALTER FUNCTION alr.take_due_steps(integer, interval) SECURITY INVOKER;
ALTER FUNCTION alr.apply_escalation(uuid, uuid) SECURITY INVOKER;
ALTER FUNCTION alr.release_step(uuid, uuid) SECURITY INVOKER;
ALTER FUNCTION alr.record_delivery(uuid, integer, uuid, text) SECURITY INVOKER;
ALTER FUNCTION alr.add_alert(text) SECURITY INVOKER;
ALTER FUNCTION alr.start_escalation(uuid, uuid) SECURITY INVOKER;
ALTER FUNCTION alr.resolve_alert(uuid) SECURITY INVOKER;
ALTER FUNCTION alr.create_policy(text, jsonb) SECURITY INVOKER;
REVOKE ALL ON ALL FUNCTIONS IN SCHEMA alr FROM pgdrain_worker, pgdrain_producer, pgdrain_operator;
REVOKE ALL ON ALL TABLES IN SCHEMA alr FROM pgdrain_operator;
REVOKE ALL ON SCHEMA alr FROM pgdrain_worker, pgdrain_producer, pgdrain_operator;
GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA alr TO PUBLIC;
ALTER DEFAULT PRIVILEGES IN SCHEMA alr GRANT EXECUTE ON FUNCTIONS TO PUBLIC;
