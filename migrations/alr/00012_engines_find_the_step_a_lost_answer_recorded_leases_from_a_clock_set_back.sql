-- +goose Up
-- +goose StatementBegin
-- The step index that lease_token recorded (the token apply_escalation kept in applied_tokens), or
-- NULL: none, or the alert is no longer firing, or someone stopped the ladder (acknowledged,
-- resolved). An engine whose apply_escalation committed but whose answer was lost (a connection
-- that died after the commit, a synchronous standby that held the commit past the engine's
-- timeout) retries it, is refused (the token was cleared), and asks this: the step its token
-- recorded is its own to deliver, once, instead of recorded and never delivered. Tokens are fresh
-- per take, so only the engine that took the step holds that token. Read-only.
CREATE OR REPLACE FUNCTION alr.recorded_by(escalation_id uuid, lease_token uuid)
RETURNS integer
LANGUAGE plpgsql
STABLE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
  PERFORM alr._escalation_known('recorded_by', recorded_by.escalation_id, recorded_by.lease_token);
  RETURN (
    SELECT pg_catalog.array_position(e.applied_tokens, recorded_by.lease_token) - 1
    FROM alr.alert_escalations e JOIN alr.alerts a ON a.id = e.alert_id
    WHERE e.id = recorded_by.escalation_id
      AND (e.stopped_at IS NULL OR e.stop_reason = 'completed')
      AND a.state = 'firing');
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- Leases up to batch_size due steps (next_at passed, ladder running, lease free or expired) for
-- `lease`, in next_at order, FOR UPDATE SKIP LOCKED so concurrent instances split the work. Every
-- row gets its own fresh lease_token (core.new_id() is evaluated per row in the SET): the lease is
-- only a deadline, the token is ownership, and apply_escalation records only with a matching token.
-- A lease that ends more than a day ahead (the longest a take hands out) was written by a clock that
-- has since been set back: it counts as over, or its step waited as long as the clock had jumped.
CREATE OR REPLACE FUNCTION alr.take_due_steps(batch_size integer DEFAULT 100, lease interval DEFAULT '2 minutes')
RETURNS TABLE(escalation_id uuid, alert_id uuid, step_idx integer, channel text, target text,
              lease_token uuid, leased_until timestamptz)
LANGUAGE plpgsql
VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  fn constant text := 'take_due_steps';
BEGIN
  IF take_due_steps.batch_size IS NULL OR take_due_steps.batch_size < 1 OR take_due_steps.batch_size > 10000 THEN
    PERFORM alr._invalid(fn, pg_catalog.format('batch_size must be between 1 and 10000, got %s',
      COALESCE(take_due_steps.batch_size::text, 'NULL')));
  END IF;
  PERFORM alr._check_span(fn, 'lease', take_due_steps.lease);
  IF take_due_steps.lease IS NULL OR take_due_steps.lease <= interval '0' OR take_due_steps.lease > interval '1 day' THEN
    PERFORM alr._invalid(fn, pg_catalog.format('lease must be greater than 0 and at most 1 day, got %s',
      COALESCE(take_due_steps.lease::text, 'NULL')));
  END IF;
  RETURN QUERY
  WITH due AS (
    SELECT d.id FROM alr.alert_escalations d
    WHERE d.stopped_at IS NULL AND d.next_at <= pg_catalog.now()
      AND (d.leased_until IS NULL OR d.leased_until <= pg_catalog.now()
           -- From the clock: a take whose transaction began earlier must not count another's
           -- fresh 1-day lease as one from a jumped clock.
           OR d.leased_until > pg_catalog.clock_timestamp() + interval '1 day')
    ORDER BY d.next_at, d.id
    LIMIT take_due_steps.batch_size
    FOR UPDATE SKIP LOCKED
  ), taken AS (
    UPDATE alr.alert_escalations e
    SET leased_until = pg_catalog.now() + take_due_steps.lease,
        lease_token = core.new_id()
    FROM due WHERE e.id = due.id
    RETURNING e.id, e.alert_id, e.policy_id, e.step_idx, e.next_at, e.lease_token, e.leased_until
  )
  SELECT t.id, t.alert_id, t.step_idx, s.channel, s.target, t.lease_token, t.leased_until
  FROM taken t
  JOIN alr.escalation_steps s ON s.policy_id = t.policy_id AND s.step_idx = t.step_idx
  ORDER BY t.next_at, t.id;
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- The name of alert alert_id, or NULL when there is no such alert. The engine reads it for the
-- messages of the steps it took (SELECT ..., alr.alert_name(t.alert_id) FROM alr.take_due_steps(...) t),
-- so the role that runs it needs no privilege on alr.alerts. Read-only. A NULL alert_id is refused
-- (22023), as every alr function refuses one.
CREATE OR REPLACE FUNCTION alr.alert_name(alert_id uuid)
RETURNS text
LANGUAGE plpgsql
STABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  v_name text;
BEGIN
  IF alert_name.alert_id IS NULL THEN
    PERFORM alr._invalid('alert_name', 'alert_id must not be NULL, got NULL');
  END IF;
  SELECT a.name INTO v_name FROM alr.alerts a WHERE a.id = alert_name.alert_id;
  RETURN v_name;
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
SET search_path = pg_catalog, pg_temp
AS $$
  SELECT '0.1.0'::text, 12;
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
-- and pins search_path (pg_catalog, then pg_temp: docs/security.md).
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

-- The _ helpers (_invalid, _not_found, _escalation_known, _check_span, _is_blank, _shown) stay INVOKER and
-- are granted to nobody (the REVOKE above): only the functions above, running as the owner, call them.

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

-- An engine whose apply's answer was lost asks which step its token recorded (alr 00012).
ALTER FUNCTION alr.recorded_by(uuid, uuid) SECURITY DEFINER;
GRANT EXECUTE ON FUNCTION alr.recorded_by(uuid, uuid) TO pgdrain_worker;
-- +goose StatementEnd

-- +goose Down
-- +goose StatementBegin
DROP FUNCTION IF EXISTS alr.recorded_by(uuid, uuid);
-- +goose StatementEnd


-- +goose StatementBegin
-- Leases up to batch_size due steps (next_at passed, ladder running, lease free or expired) for
-- `lease`, in next_at order, FOR UPDATE SKIP LOCKED so concurrent instances split the work. Every
-- row gets its own fresh lease_token (core.new_id() is evaluated per row in the SET): the lease is
-- only a deadline, the token is ownership, and apply_escalation records only with a matching token.
CREATE OR REPLACE FUNCTION alr.take_due_steps(batch_size integer DEFAULT 100, lease interval DEFAULT '2 minutes')
RETURNS TABLE(escalation_id uuid, alert_id uuid, step_idx integer, channel text, target text,
              lease_token uuid, leased_until timestamptz)
LANGUAGE plpgsql
VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  fn constant text := 'take_due_steps';
BEGIN
  IF take_due_steps.batch_size IS NULL OR take_due_steps.batch_size < 1 OR take_due_steps.batch_size > 10000 THEN
    PERFORM alr._invalid(fn, pg_catalog.format('batch_size must be between 1 and 10000, got %s',
      COALESCE(take_due_steps.batch_size::text, 'NULL')));
  END IF;
  PERFORM alr._check_span(fn, 'lease', take_due_steps.lease);
  IF take_due_steps.lease IS NULL OR take_due_steps.lease <= interval '0' OR take_due_steps.lease > interval '1 day' THEN
    PERFORM alr._invalid(fn, pg_catalog.format('lease must be greater than 0 and at most 1 day, got %s',
      COALESCE(take_due_steps.lease::text, 'NULL')));
  END IF;
  RETURN QUERY
  WITH due AS (
    SELECT d.id FROM alr.alert_escalations d
    WHERE d.stopped_at IS NULL AND d.next_at <= pg_catalog.now()
      AND (d.leased_until IS NULL OR d.leased_until <= pg_catalog.now())
    ORDER BY d.next_at, d.id
    LIMIT take_due_steps.batch_size
    FOR UPDATE SKIP LOCKED
  ), taken AS (
    UPDATE alr.alert_escalations e
    SET leased_until = pg_catalog.now() + take_due_steps.lease,
        lease_token = core.new_id()
    FROM due WHERE e.id = due.id
    RETURNING e.id, e.alert_id, e.policy_id, e.step_idx, e.next_at, e.lease_token, e.leased_until
  )
  SELECT t.id, t.alert_id, t.step_idx, s.channel, s.target, t.lease_token, t.leased_until
  FROM taken t
  JOIN alr.escalation_steps s ON s.policy_id = t.policy_id AND s.step_idx = t.step_idx
  ORDER BY t.next_at, t.id;
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- The name of alert alert_id, or NULL when there is no such alert. The engine reads it for the
-- messages of the steps it took (SELECT ..., alr.alert_name(t.alert_id) FROM alr.take_due_steps(...) t),
-- so the role that runs it needs no privilege on alr.alerts. Read-only.
CREATE OR REPLACE FUNCTION alr.alert_name(alert_id uuid)
RETURNS text
LANGUAGE sql
STABLE
SET search_path = pg_catalog, pg_temp
AS $$
  SELECT a.name FROM alr.alerts a WHERE a.id = alert_name.alert_id;
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
SET search_path = pg_catalog, pg_temp
AS $$
  SELECT '0.1.0'::text, 11;
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
-- and pins search_path (pg_catalog, then pg_temp: docs/security.md).
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

-- The _ helpers (_invalid, _not_found, _escalation_known, _check_span, _is_blank, _shown) stay INVOKER and
-- are granted to nobody (the REVOKE above): only the functions above, running as the owner, call them.

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
