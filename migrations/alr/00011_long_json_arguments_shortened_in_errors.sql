-- +goose Up
-- +goose StatementBegin
-- A JSON argument as an error message shows it: whole when short, else its first 200 characters and
-- its length (an array of steps over the cap by its count), so that a mistaken megabyte is not
-- echoed back into the error and the server log. NULL for NULL.
CREATE OR REPLACE FUNCTION alr._shown(p_value jsonb)
RETURNS text
LANGUAGE sql
IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$
  SELECT CASE
    WHEN pg_catalog.jsonb_typeof(p_value) = 'array' AND pg_catalog.jsonb_array_length(p_value) > 100
      THEN pg_catalog.format('an array of %s elements', pg_catalog.jsonb_array_length(p_value))
    WHEN pg_catalog.length(p_value::text) > 200
      THEN pg_catalog.format('%s... (%s characters)', pg_catalog.left(p_value::text, 200), pg_catalog.length(p_value::text))
    ELSE p_value::text
  END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- Creates an escalation policy from a JSON array of steps, each exactly
-- {"delay": "<interval>", "channel": "<name>", "target": "<address>"}; returns its id. Everything is
-- validated before anything is written, so a rejected policy leaves no trace. A name or a channel is
-- at most 200 characters (a channel is a metric label), a target at most 1000; none may be blank
-- (alr._is_blank: Unicode white space and zero-width characters too).
CREATE OR REPLACE FUNCTION alr.create_policy(name text, steps jsonb)
RETURNS uuid
LANGUAGE plpgsql
VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  fn constant text := 'create_policy';
  v_id uuid := core.new_id();
  v_step jsonb;
  v_idx integer := 0;
  v_delays interval[] := '{}';
  v_delay interval;
  v_key text;
BEGIN
  -- The length first: a blank name over the cap is not echoed whole in the error.
  IF pg_catalog.length(create_policy.name) > 200 THEN
    PERFORM alr._invalid(fn, pg_catalog.format('name must be at most 200 characters, got %s characters',
      pg_catalog.length(create_policy.name)));
  END IF;
  IF create_policy.name IS NULL OR alr._is_blank(create_policy.name) THEN
    PERFORM alr._invalid(fn, pg_catalog.format('name must be a non-empty text, got %s',
      COALESCE(pg_catalog.quote_literal(create_policy.name), 'NULL')));
  END IF;
  IF steps IS NULL OR pg_catalog.jsonb_typeof(steps) <> 'array' OR pg_catalog.jsonb_array_length(steps) = 0
     OR pg_catalog.jsonb_array_length(steps) > 100 THEN
    PERFORM alr._invalid(fn, pg_catalog.format('steps must be a JSON array of 1 to 100 steps, got %s',
      COALESCE(alr._shown(steps), 'NULL')));
  END IF;
  FOR v_step IN SELECT s.value FROM pg_catalog.jsonb_array_elements(steps) WITH ORDINALITY AS s(value, n) ORDER BY s.n LOOP
    IF pg_catalog.jsonb_typeof(v_step) <> 'object' THEN
      PERFORM alr._invalid(fn, pg_catalog.format(
        'steps[%s] must be an object {"delay", "channel", "target"}, got %s', v_idx, alr._shown(v_step)));
    END IF;
    FOR v_key IN SELECT k FROM pg_catalog.jsonb_object_keys(v_step) AS k ORDER BY k LOOP
      IF v_key NOT IN ('delay', 'channel', 'target') THEN
        PERFORM alr._invalid(fn, pg_catalog.format(
          'steps[%s] must only have the keys delay, channel, target, got key %s', v_idx, pg_catalog.quote_literal(v_key)));
      END IF;
    END LOOP;
    v_delay := NULL;
    IF pg_catalog.jsonb_typeof(v_step -> 'delay') = 'string' THEN
      BEGIN
        v_delay := (v_step ->> 'delay')::interval;
      EXCEPTION WHEN invalid_datetime_format OR datetime_field_overflow OR interval_field_overflow THEN
        v_delay := NULL;
      END;
    END IF;
    IF v_delay IS NULL OR v_delay < interval '0' THEN
      PERFORM alr._invalid(fn, pg_catalog.format('steps[%s].delay must be a non-negative interval, got %s',
        v_idx, COALESCE(alr._shown(v_step -> 'delay'), 'nothing')));
    END IF;
    -- A delay of mixed signs ('1 mon -29 days') adds to the clock as another span than it compares
    -- as; one over ten years would make start_escalation's next_at overflow (22008).
    PERFORM alr._check_span(fn, pg_catalog.format('steps[%s].delay', v_idx), v_delay);
    IF v_delay > interval '3650 days' THEN
      PERFORM alr._invalid(fn, pg_catalog.format('steps[%s].delay must be at most 3650 days, got %s', v_idx, v_delay));
    END IF;
    IF pg_catalog.jsonb_typeof(v_step -> 'channel') = 'string' AND pg_catalog.length(v_step ->> 'channel') > 200 THEN
      PERFORM alr._invalid(fn, pg_catalog.format('steps[%s].channel must be at most 200 characters, got %s characters',
        v_idx, pg_catalog.length(v_step ->> 'channel')));
    END IF;
    IF pg_catalog.jsonb_typeof(v_step -> 'channel') IS DISTINCT FROM 'string'
       OR alr._is_blank(v_step ->> 'channel') THEN
      PERFORM alr._invalid(fn, pg_catalog.format('steps[%s].channel must be a non-empty string, got %s',
        v_idx, COALESCE(alr._shown(v_step -> 'channel'), 'nothing')));
    END IF;
    IF pg_catalog.jsonb_typeof(v_step -> 'target') = 'string' AND pg_catalog.length(v_step ->> 'target') > 1000 THEN
      PERFORM alr._invalid(fn, pg_catalog.format('steps[%s].target must be at most 1000 characters, got %s characters',
        v_idx, pg_catalog.length(v_step ->> 'target')));
    END IF;
    IF pg_catalog.jsonb_typeof(v_step -> 'target') IS DISTINCT FROM 'string'
       OR alr._is_blank(v_step ->> 'target') THEN
      PERFORM alr._invalid(fn, pg_catalog.format('steps[%s].target must be a non-empty string, got %s',
        v_idx, COALESCE(alr._shown(v_step -> 'target'), 'nothing')));
    END IF;
    v_delays := v_delays || v_delay;
    v_idx := v_idx + 1;
  END LOOP;

  INSERT INTO alr.escalation_policies (id, name) VALUES (v_id, create_policy.name);
  INSERT INTO alr.escalation_steps (policy_id, step_idx, delay, channel, target)
  SELECT v_id, (s.n - 1)::integer, v_delays[s.n], s.value ->> 'channel', s.value ->> 'target'
  FROM pg_catalog.jsonb_array_elements(steps) WITH ORDINALITY AS s(value, n);
  RETURN v_id;
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

-- +goose Down
-- +goose StatementBegin
-- Creates an escalation policy from a JSON array of steps, each exactly
-- {"delay": "<interval>", "channel": "<name>", "target": "<address>"}; returns its id. Everything is
-- validated before anything is written, so a rejected policy leaves no trace. A name or a channel is
-- at most 200 characters (a channel is a metric label), a target at most 1000; none may be blank
-- (alr._is_blank: Unicode white space and zero-width characters too).
CREATE OR REPLACE FUNCTION alr.create_policy(name text, steps jsonb)
RETURNS uuid
LANGUAGE plpgsql
VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  fn constant text := 'create_policy';
  v_id uuid := core.new_id();
  v_step jsonb;
  v_idx integer := 0;
  v_delays interval[] := '{}';
  v_delay interval;
  v_key text;
BEGIN
  -- The length first: a blank name over the cap is not echoed whole in the error.
  IF pg_catalog.length(create_policy.name) > 200 THEN
    PERFORM alr._invalid(fn, pg_catalog.format('name must be at most 200 characters, got %s characters',
      pg_catalog.length(create_policy.name)));
  END IF;
  IF create_policy.name IS NULL OR alr._is_blank(create_policy.name) THEN
    PERFORM alr._invalid(fn, pg_catalog.format('name must be a non-empty text, got %s',
      COALESCE(pg_catalog.quote_literal(create_policy.name), 'NULL')));
  END IF;
  IF steps IS NULL OR pg_catalog.jsonb_typeof(steps) <> 'array' OR pg_catalog.jsonb_array_length(steps) = 0
     OR pg_catalog.jsonb_array_length(steps) > 100 THEN
    PERFORM alr._invalid(fn, pg_catalog.format('steps must be a JSON array of 1 to 100 steps, got %s',
      COALESCE(steps::text, 'NULL')));
  END IF;
  FOR v_step IN SELECT s.value FROM pg_catalog.jsonb_array_elements(steps) WITH ORDINALITY AS s(value, n) ORDER BY s.n LOOP
    IF pg_catalog.jsonb_typeof(v_step) <> 'object' THEN
      PERFORM alr._invalid(fn, pg_catalog.format(
        'steps[%s] must be an object {"delay", "channel", "target"}, got %s', v_idx, v_step));
    END IF;
    FOR v_key IN SELECT k FROM pg_catalog.jsonb_object_keys(v_step) AS k ORDER BY k LOOP
      IF v_key NOT IN ('delay', 'channel', 'target') THEN
        PERFORM alr._invalid(fn, pg_catalog.format(
          'steps[%s] must only have the keys delay, channel, target, got key %s', v_idx, pg_catalog.quote_literal(v_key)));
      END IF;
    END LOOP;
    v_delay := NULL;
    IF pg_catalog.jsonb_typeof(v_step -> 'delay') = 'string' THEN
      BEGIN
        v_delay := (v_step ->> 'delay')::interval;
      EXCEPTION WHEN invalid_datetime_format OR datetime_field_overflow OR interval_field_overflow THEN
        v_delay := NULL;
      END;
    END IF;
    IF v_delay IS NULL OR v_delay < interval '0' THEN
      PERFORM alr._invalid(fn, pg_catalog.format('steps[%s].delay must be a non-negative interval, got %s',
        v_idx, COALESCE((v_step -> 'delay')::text, 'nothing')));
    END IF;
    -- A delay of mixed signs ('1 mon -29 days') adds to the clock as another span than it compares
    -- as; one over ten years would make start_escalation's next_at overflow (22008).
    PERFORM alr._check_span(fn, pg_catalog.format('steps[%s].delay', v_idx), v_delay);
    IF v_delay > interval '3650 days' THEN
      PERFORM alr._invalid(fn, pg_catalog.format('steps[%s].delay must be at most 3650 days, got %s', v_idx, v_delay));
    END IF;
    IF pg_catalog.jsonb_typeof(v_step -> 'channel') = 'string' AND pg_catalog.length(v_step ->> 'channel') > 200 THEN
      PERFORM alr._invalid(fn, pg_catalog.format('steps[%s].channel must be at most 200 characters, got %s characters',
        v_idx, pg_catalog.length(v_step ->> 'channel')));
    END IF;
    IF pg_catalog.jsonb_typeof(v_step -> 'channel') IS DISTINCT FROM 'string'
       OR alr._is_blank(v_step ->> 'channel') THEN
      PERFORM alr._invalid(fn, pg_catalog.format('steps[%s].channel must be a non-empty string, got %s',
        v_idx, COALESCE((v_step -> 'channel')::text, 'nothing')));
    END IF;
    IF pg_catalog.jsonb_typeof(v_step -> 'target') = 'string' AND pg_catalog.length(v_step ->> 'target') > 1000 THEN
      PERFORM alr._invalid(fn, pg_catalog.format('steps[%s].target must be at most 1000 characters, got %s characters',
        v_idx, pg_catalog.length(v_step ->> 'target')));
    END IF;
    IF pg_catalog.jsonb_typeof(v_step -> 'target') IS DISTINCT FROM 'string'
       OR alr._is_blank(v_step ->> 'target') THEN
      PERFORM alr._invalid(fn, pg_catalog.format('steps[%s].target must be a non-empty string, got %s',
        v_idx, COALESCE((v_step -> 'target')::text, 'nothing')));
    END IF;
    v_delays := v_delays || v_delay;
    v_idx := v_idx + 1;
  END LOOP;

  INSERT INTO alr.escalation_policies (id, name) VALUES (v_id, create_policy.name);
  INSERT INTO alr.escalation_steps (policy_id, step_idx, delay, channel, target)
  SELECT v_id, (s.n - 1)::integer, v_delays[s.n], s.value ->> 'channel', s.value ->> 'target'
  FROM pg_catalog.jsonb_array_elements(steps) WITH ORDINALITY AS s(value, n);
  RETURN v_id;
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
DROP FUNCTION IF EXISTS alr._shown(jsonb);
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
  SELECT '0.1.0'::text, 10;
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
