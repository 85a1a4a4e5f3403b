-- +goose Up
-- +goose StatementBegin
-- Acknowledgement (issue 32 item 1): someone on call has taken an alert. alr.acknowledge_alert
-- writes one row here per alert (the first acknowledgement is kept) and stops the alert's running
-- ladders with stop_reason 'acknowledged', so no further step pages anyone; the alert stays firing
-- until resolve_alert. Written only by acknowledge_alert (SECURITY DEFINER); read by the console.
CREATE TABLE alr.alert_acknowledgements (
  alert_id uuid PRIMARY KEY REFERENCES alr.alerts (id) ON DELETE CASCADE,
  acknowledged_at timestamptz NOT NULL DEFAULT pg_catalog.now(),
  acknowledged_by text NOT NULL DEFAULT session_user,
  note text CHECK (note IS NULL OR (pg_catalog.btrim(note) <> '' AND pg_catalog.length(note) <= 1000))
);
COMMENT ON TABLE alr.alert_acknowledgements IS
  'Who acknowledged a firing alert and when (alr.acknowledge_alert): its ladders stopped, it stays firing until resolved.';
COMMENT ON COLUMN alr.alert_acknowledgements.acknowledged_by IS
  'The login role that acknowledged (session_user); a shared login (a console) names the person in note.';

ALTER TABLE alr.alert_escalations DROP CONSTRAINT alert_escalations_stop_reason_check;
ALTER TABLE alr.alert_escalations ADD CONSTRAINT alert_escalations_stop_reason_check
  CHECK (stop_reason IN ('resolved', 'completed', 'acknowledged'));
COMMENT ON COLUMN alr.alert_escalations.stop_reason IS
  'Why the ladder stopped: resolved (resolve_alert), completed (its last step was recorded) or '
  'acknowledged (acknowledge_alert: someone is on it, no further step).';

-- The recently resolved alerts, newest first (alr.resolved_alerts): the scan stops after the rows shown.
CREATE INDEX alerts_resolved ON alr.alerts (resolved_at DESC, id DESC) WHERE state = 'resolved';
-- +goose StatementEnd

-- +goose StatementBegin
-- Acknowledges a firing alert: someone on call is on it. Records who (the login role, session_user)
-- and when, with an optional note (a shared login such as the console names the person there), and
-- stops the alert's running ladders (stop_reason acknowledged; next_at, lease and token cleared) in
-- the same transaction, so no further step is delivered: a step an engine already took is refused by
-- apply_escalation, which records only on a running ladder. The alert stays firing until
-- resolve_alert; start_escalation refuses it meanwhile. Returns true when this call acknowledged it,
-- false (changing nothing) when it was already acknowledged (the first acknowledgement is kept) or
-- is resolved. Locks the alert, then its ladders: resolve_alert's and start_escalation's order.
CREATE OR REPLACE FUNCTION alr.acknowledge_alert(alert_id uuid, note text DEFAULT NULL)
RETURNS boolean
LANGUAGE plpgsql
VOLATILE
SET search_path = ''
AS $$
DECLARE
  fn constant text := 'acknowledge_alert';
  v_state text;
BEGIN
  IF acknowledge_alert.alert_id IS NULL THEN
    PERFORM alr._invalid(fn, 'alert_id must not be NULL, got NULL');
  END IF;
  IF acknowledge_alert.note IS NOT NULL
     AND (pg_catalog.btrim(acknowledge_alert.note) = '' OR pg_catalog.length(acknowledge_alert.note) > 1000) THEN
    PERFORM alr._invalid(fn, pg_catalog.format(
      'note must be NULL or a non-blank text of at most 1000 characters, got %s',
      CASE WHEN pg_catalog.length(acknowledge_alert.note) > 1000
           THEN pg_catalog.length(acknowledge_alert.note)::text || ' characters'
           ELSE pg_catalog.quote_literal(acknowledge_alert.note) END));
  END IF;
  SELECT a.state INTO v_state FROM alr.alerts a WHERE a.id = acknowledge_alert.alert_id FOR UPDATE;
  IF NOT FOUND THEN
    PERFORM alr._not_found(fn, 'alert_id', 'alert', acknowledge_alert.alert_id);
  END IF;
  IF v_state <> 'firing' THEN
    RETURN false;
  END IF;
  INSERT INTO alr.alert_acknowledgements AS k (alert_id, note)
  VALUES (acknowledge_alert.alert_id, acknowledge_alert.note)
  ON CONFLICT ON CONSTRAINT alert_acknowledgements_pkey DO NOTHING;
  IF NOT FOUND THEN
    RETURN false;
  END IF;
  UPDATE alr.alert_escalations e
  SET stopped_at = pg_catalog.now(), stop_reason = 'acknowledged', next_at = NULL, leased_until = NULL,
      lease_token = NULL
  WHERE e.alert_id = acknowledge_alert.alert_id AND e.stopped_at IS NULL;
  RETURN true;
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- The most recently resolved alerts, newest first, at most max_rows (1..1000), through the partial
-- index alerts_resolved so the cost follows the rows returned: when each fired, who acknowledged it
-- and when (NULL if nobody did), when it was resolved, and how many of its ladders' steps were
-- delivered (the journal). For the console's history and for dashboards (pgdrain_reader).
CREATE OR REPLACE FUNCTION alr.resolved_alerts(max_rows integer DEFAULT 50)
RETURNS TABLE(alert_id uuid, name text, created_at timestamptz, acknowledged_at timestamptz,
              acknowledged_by text, note text, resolved_at timestamptz, steps_delivered bigint)
LANGUAGE plpgsql
STABLE
SET search_path = ''
AS $$
DECLARE
  fn constant text := 'resolved_alerts';
BEGIN
  IF resolved_alerts.max_rows IS NULL OR resolved_alerts.max_rows < 1 OR resolved_alerts.max_rows > 1000 THEN
    PERFORM alr._invalid(fn, pg_catalog.format('max_rows must be between 1 and 1000, got %s',
      COALESCE(resolved_alerts.max_rows::text, 'NULL')));
  END IF;
  RETURN QUERY
  SELECT a.id, a.name, a.created_at, k.acknowledged_at, k.acknowledged_by, k.note, a.resolved_at,
         (SELECT pg_catalog.count(*) FROM alr.alert_escalations e
          JOIN alr.delivery_journal j ON j.escalation_id = e.id
          WHERE e.alert_id = a.id AND j.outcome = 'delivered')
  FROM alr.alerts a
  LEFT JOIN alr.alert_acknowledgements k ON k.alert_id = a.id
  WHERE a.state = 'resolved'
  ORDER BY a.resolved_at DESC, a.id DESC
  LIMIT resolved_alerts.max_rows;
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- The version of the alr schema (the escalation ladder) installed in this database: the release it
-- belongs to and the number of the last migration applied (the file migrations/alr/NNNNN_*.sql). The
-- escalation engine checks migration >= the one it needs before it starts.
-- Every migration carries this function with its own number (a test compares the two), and its
-- Down restores the body before it, so the answer is right after goose up or down to any migration.
CREATE OR REPLACE FUNCTION alr.version(OUT version text, OUT migration integer)
LANGUAGE sql
STABLE
PARALLEL SAFE
SET search_path = ''
AS $$
  SELECT '0.1.0'::text, 6;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- Starts the policy's ladder for a firing alert: step 0 becomes due after its delay. Idempotent:
-- while a ladder of this alert and policy is running, returns that ladder's id (a unique partial
-- index settles concurrent starts). An acknowledged alert is refused like a resolved one: someone is
-- on it, and a new ladder would page again.
CREATE OR REPLACE FUNCTION alr.start_escalation(alert_id uuid, policy_id uuid)
RETURNS uuid
LANGUAGE plpgsql
VOLATILE
SET search_path = ''
AS $$
#variable_conflict use_column
DECLARE
  fn constant text := 'start_escalation';
  v_state text;
  v_delay interval;
  v_id uuid;
BEGIN
  IF start_escalation.alert_id IS NULL THEN
    PERFORM alr._invalid(fn, 'alert_id must not be NULL, got NULL');
  END IF;
  IF start_escalation.policy_id IS NULL THEN
    PERFORM alr._invalid(fn, 'policy_id must not be NULL, got NULL');
  END IF;
  SELECT a.state INTO v_state FROM alr.alerts a WHERE a.id = start_escalation.alert_id FOR KEY SHARE;
  IF NOT FOUND THEN
    PERFORM alr._not_found(fn, 'alert_id', 'alert', start_escalation.alert_id);
  END IF;
  IF v_state <> 'firing' THEN
    PERFORM alr._invalid(fn, pg_catalog.format('alert_id must name a firing alert, got %s (%s)',
      start_escalation.alert_id, v_state));
  END IF;
  IF EXISTS (SELECT 1 FROM alr.alert_acknowledgements k WHERE k.alert_id = start_escalation.alert_id) THEN
    PERFORM alr._invalid(fn, pg_catalog.format('alert_id must name an alert nobody acknowledged, got %s (acknowledged)',
      start_escalation.alert_id));
  END IF;
  SELECT s.delay INTO v_delay FROM alr.escalation_steps s
  WHERE s.policy_id = start_escalation.policy_id AND s.step_idx = 0;
  IF NOT FOUND THEN
    PERFORM alr._not_found(fn, 'policy_id', 'policy', start_escalation.policy_id);
  END IF;

  INSERT INTO alr.alert_escalations AS e (id, alert_id, policy_id, step_idx, next_at)
  VALUES (core.new_id(), start_escalation.alert_id, start_escalation.policy_id, 0, pg_catalog.now() + v_delay)
  ON CONFLICT (alert_id, policy_id) WHERE stopped_at IS NULL DO NOTHING
  RETURNING e.id INTO v_id;
  IF v_id IS NULL THEN
    SELECT e.id INTO STRICT v_id FROM alr.alert_escalations e
    WHERE e.alert_id = start_escalation.alert_id AND e.policy_id = start_escalation.policy_id
      AND e.stopped_at IS NULL;
  END IF;
  RETURN v_id;
END;
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
GRANT USAGE ON SCHEMA alr TO pgdrain_worker, pgdrain_producer, pgdrain_operator, pgdrain_reader;

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

-- Operators resolve an alert from the console; readers see the ladders (no payloads live here).
GRANT EXECUTE ON FUNCTION alr.resolve_alert(uuid) TO pgdrain_operator;
GRANT SELECT ON alr.alerts, alr.escalation_policies, alr.escalation_steps, alr.alert_escalations,
  alr.delivery_journal TO pgdrain_reader;

-- Everyone who may use the schema reads its version (alr.version: a constant, no data): the
-- escalation engine checks it at start, pgdrain --version prints it.
GRANT EXECUTE ON FUNCTION alr.version() TO pgdrain_worker, pgdrain_producer, pgdrain_operator, pgdrain_reader;

-- Acknowledgement (alr 00006): operators acknowledge (the console, on call); readers and operators
-- read the resolved alerts and who acknowledged what. acknowledge_alert is DEFINER: nobody writes
-- alert_acknowledgements or stops a ladder directly.
ALTER FUNCTION alr.acknowledge_alert(uuid, text) SECURITY DEFINER;
ALTER FUNCTION alr.resolved_alerts(integer) SECURITY DEFINER;
GRANT EXECUTE ON FUNCTION alr.acknowledge_alert(uuid, text) TO pgdrain_operator;
GRANT EXECUTE ON FUNCTION alr.resolved_alerts(integer) TO pgdrain_reader, pgdrain_operator;
GRANT SELECT ON alr.alert_acknowledgements TO pgdrain_reader, pgdrain_operator;
-- +goose StatementEnd

-- +goose Down
-- +goose StatementBegin
-- Back to 00005. A ladder stopped by an acknowledgement is recorded as resolved (the nearest
-- reason 00005 knows: a person ended it); the acknowledgements themselves are dropped.
DROP FUNCTION alr.acknowledge_alert(uuid, text);
DROP FUNCTION alr.resolved_alerts(integer);
DROP INDEX alr.alerts_resolved;
UPDATE alr.alert_escalations SET stop_reason = 'resolved' WHERE stop_reason = 'acknowledged';
ALTER TABLE alr.alert_escalations DROP CONSTRAINT alert_escalations_stop_reason_check;
ALTER TABLE alr.alert_escalations ADD CONSTRAINT alert_escalations_stop_reason_check
  CHECK (stop_reason IN ('resolved', 'completed'));
COMMENT ON COLUMN alr.alert_escalations.stop_reason IS
  'Why the ladder stopped: resolved (resolve_alert) or completed (its last step was recorded).';
DROP TABLE alr.alert_acknowledgements;
DROP FUNCTION alr.version();
-- +goose StatementEnd

-- +goose StatementBegin
-- Starts the policy's ladder for a firing alert: step 0 becomes due after its delay. Idempotent:
-- while a ladder of this alert and policy is running, returns that ladder's id (a unique partial
-- index settles concurrent starts).
CREATE OR REPLACE FUNCTION alr.start_escalation(alert_id uuid, policy_id uuid)
RETURNS uuid
LANGUAGE plpgsql
VOLATILE
SET search_path = ''
AS $$
#variable_conflict use_column
DECLARE
  fn constant text := 'start_escalation';
  v_state text;
  v_delay interval;
  v_id uuid;
BEGIN
  IF start_escalation.alert_id IS NULL THEN
    PERFORM alr._invalid(fn, 'alert_id must not be NULL, got NULL');
  END IF;
  IF start_escalation.policy_id IS NULL THEN
    PERFORM alr._invalid(fn, 'policy_id must not be NULL, got NULL');
  END IF;
  SELECT a.state INTO v_state FROM alr.alerts a WHERE a.id = start_escalation.alert_id FOR KEY SHARE;
  IF NOT FOUND THEN
    PERFORM alr._not_found(fn, 'alert_id', 'alert', start_escalation.alert_id);
  END IF;
  IF v_state <> 'firing' THEN
    PERFORM alr._invalid(fn, pg_catalog.format('alert_id must name a firing alert, got %s (%s)',
      start_escalation.alert_id, v_state));
  END IF;
  SELECT s.delay INTO v_delay FROM alr.escalation_steps s
  WHERE s.policy_id = start_escalation.policy_id AND s.step_idx = 0;
  IF NOT FOUND THEN
    PERFORM alr._not_found(fn, 'policy_id', 'policy', start_escalation.policy_id);
  END IF;

  INSERT INTO alr.alert_escalations AS e (id, alert_id, policy_id, step_idx, next_at)
  VALUES (core.new_id(), start_escalation.alert_id, start_escalation.policy_id, 0, pg_catalog.now() + v_delay)
  ON CONFLICT (alert_id, policy_id) WHERE stopped_at IS NULL DO NOTHING
  RETURNING e.id INTO v_id;
  IF v_id IS NULL THEN
    SELECT e.id INTO STRICT v_id FROM alr.alert_escalations e
    WHERE e.alert_id = start_escalation.alert_id AND e.policy_id = start_escalation.policy_id
      AND e.stopped_at IS NULL;
  END IF;
  RETURN v_id;
END;
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
GRANT USAGE ON SCHEMA alr TO pgdrain_worker, pgdrain_producer, pgdrain_operator, pgdrain_reader;

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

-- Operators resolve an alert from the console; readers see the ladders (no payloads live here).
GRANT EXECUTE ON FUNCTION alr.resolve_alert(uuid) TO pgdrain_operator;
GRANT SELECT ON alr.alerts, alr.escalation_policies, alr.escalation_steps, alr.alert_escalations,
  alr.delivery_journal TO pgdrain_reader;
-- +goose StatementEnd

