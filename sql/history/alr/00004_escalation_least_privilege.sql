-- +goose Up
-- +goose StatementBegin
-- The three pgdrain roles (cluster-wide, NOLOGIN), created only when missing: the same statement as
-- outbox/00002, because a service may migrate module alr without module outbox. A DBA may create
-- them beforehand when the migrating role lacks CREATEROLE; a concurrent creator simply wins.
DO $roles$
DECLARE
  v_role text;
BEGIN
  FOREACH v_role IN ARRAY ARRAY['pgdrain_worker', 'pgdrain_producer', 'pgdrain_operator'] LOOP
    IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_roles r WHERE r.rolname = v_role) THEN
      BEGIN
        EXECUTE pg_catalog.format('CREATE ROLE %I NOLOGIN', v_role);
      EXCEPTION WHEN duplicate_object OR unique_violation THEN
        NULL;
      END;
    END IF;
  END LOOP;
END
$roles$;
-- +goose StatementEnd

-- +goose StatementBegin
-- The name of alert alert_id, or NULL when there is no such alert. The engine reads it for the
-- messages of the steps it took (SELECT ..., alr.alert_name(t.alert_id) FROM alr.take_due_steps(...) t),
-- so the role that runs it needs no privilege on alr.alerts. Read-only.
CREATE OR REPLACE FUNCTION alr.alert_name(alert_id uuid)
RETURNS text
LANGUAGE sql
STABLE
SET search_path = ''
AS $$
  SELECT a.name FROM alr.alerts a WHERE a.id = alert_name.alert_id;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- Every channel some policy's steps use, with how many policies use it and how many running ladders
-- still have a step on it (the current step or a later one). An engine compares it with its
-- notifiers at start: a channel nobody serves is a configuration error that would otherwise show
-- only when its first step comes due. Read-only; one walk over the (small) policy tables.
CREATE OR REPLACE FUNCTION alr.channels_in_use()
RETURNS TABLE(channel text, policies bigint, running_ladders bigint)
LANGUAGE sql
STABLE
SET search_path = ''
AS $$
  SELECT s.channel, pg_catalog.count(DISTINCT s.policy_id), pg_catalog.count(DISTINCT e.id)
  FROM alr.escalation_steps s
  LEFT JOIN alr.alert_escalations e
    ON e.policy_id = s.policy_id AND e.stopped_at IS NULL AND s.step_idx >= e.step_idx
  GROUP BY s.channel
  ORDER BY s.channel;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- Who may call what in schema alr (canonical source; migration alr/00004 carries the same
-- statements, and the drift check runs this file after sql/functions because CREATE OR REPLACE
-- FUNCTION resets SECURITY DEFINER to INVOKER). Idempotent. The reasons are in docs/security.md.
-- The roles are the outbox's three (pgdrain_worker, pgdrain_producer, pgdrain_operator).
--
-- Nothing in alr is executable by PUBLIC, also functions added later by the migrating role.
REVOKE ALL ON ALL FUNCTIONS IN SCHEMA alr FROM PUBLIC;
ALTER DEFAULT PRIVILEGES IN SCHEMA alr REVOKE EXECUTE ON FUNCTIONS FROM PUBLIC;
GRANT USAGE ON SCHEMA alr TO pgdrain_worker, pgdrain_producer, pgdrain_operator;

-- SECURITY DEFINER: callers get exactly what the function does and no privilege on any alr table,
-- so an engine can not advance a ladder or clear a token with a plain UPDATE, and nobody but the
-- owner writes the delivery journal except through record_delivery. Each validates its arguments
-- and pins search_path = ''.
ALTER FUNCTION alr.take_due_steps(integer, interval) SECURITY DEFINER;
ALTER FUNCTION alr.apply_escalation(uuid, uuid) SECURITY DEFINER;
ALTER FUNCTION alr.release_step(uuid, uuid) SECURITY DEFINER;
ALTER FUNCTION alr.record_delivery(uuid, integer, uuid, text) SECURITY DEFINER;
ALTER FUNCTION alr.alert_name(uuid) SECURITY DEFINER;
ALTER FUNCTION alr.channels_in_use() SECURITY DEFINER;
ALTER FUNCTION alr.add_alert(text) SECURITY DEFINER;
ALTER FUNCTION alr.start_escalation(uuid, uuid) SECURITY DEFINER;
ALTER FUNCTION alr.resolve_alert(uuid) SECURITY DEFINER;
ALTER FUNCTION alr.create_policy(text, jsonb) SECURITY DEFINER;

-- Workers run the escalation engine: take, record, give back, journal; the alert's name for the
-- message and the channels the policies use (the engine's start-up check).
GRANT EXECUTE ON FUNCTION
  alr.take_due_steps(integer, interval),
  alr.apply_escalation(uuid, uuid),
  alr.release_step(uuid, uuid),
  alr.record_delivery(uuid, integer, uuid, text),
  alr.alert_name(uuid),
  alr.channels_in_use()
  TO pgdrain_worker;

-- Producers are what raises alerts (the monitoring system): add, start a ladder, resolve.
GRANT EXECUTE ON FUNCTION
  alr.add_alert(text),
  alr.start_escalation(uuid, uuid),
  alr.resolve_alert(uuid)
  TO pgdrain_producer;

-- Operators write policies, see which channels they use, and read the ladder's state (no payloads
-- live here: names, channels, targets, steps, the journal). They can change no row directly.
GRANT EXECUTE ON FUNCTION
  alr.create_policy(text, jsonb),
  alr.channels_in_use()
  TO pgdrain_operator;
GRANT SELECT ON alr.alerts, alr.escalation_policies, alr.escalation_steps, alr.alert_escalations,
  alr.delivery_journal TO pgdrain_operator;

-- The _ helpers (_invalid, _not_found, _escalation_known) stay INVOKER and are granted to nobody:
-- only the functions above, running as the owner, call them.
-- +goose StatementEnd

-- +goose Down
-- +goose StatementBegin
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
-- +goose StatementEnd
