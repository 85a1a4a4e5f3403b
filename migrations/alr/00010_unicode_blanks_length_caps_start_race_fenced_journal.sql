-- +goose Up
-- +goose StatementBegin
-- The delivery journal fenced by the token (seed 000: a mismatched token touches nothing).
-- apply_escalation clears the lease token when it records a step, so it keeps that token here, one
-- element per step (element step_idx + 1); record_delivery journals the step only with that token and
-- clears the element, so a step gets one journal row, from the take that recorded it. Per step and
-- not one column: the next step may be taken and recorded (a zero delay, another engine) before the
-- delivery of this one is journaled. A step recorded before this migration has no element: its late
-- journal call is refused.
ALTER TABLE alr.alert_escalations ADD COLUMN applied_tokens uuid[];
COMMENT ON COLUMN alr.alert_escalations.applied_tokens IS
  'For each step recorded and not yet journaled (element step_idx + 1), the token of the take whose '
  'apply_escalation recorded it: the only token alr.record_delivery accepts for that step, once (it '
  'then clears the element). NULL elements: not recorded yet, or journaled.';
-- +goose StatementEnd

-- +goose StatementBegin
-- Whether a text shows nothing: true when it is empty or made only of white space (every character
-- of Unicode's White_Space property) or of the zero-width format characters that render as nothing
-- (U+180E, U+200B..U+200D, U+2060, U+FEFF); NULL for NULL. The class is spelled out code point by
-- code point rather than [[:space:]], whose meaning follows the database's ctype (ASCII only under
-- C, the clusters' --no-locale), so the answer is the same in every database. The names, channels,
-- targets and notes of schema alr use it. (LANGUAGE sql, but not inlined: a pinned search_path,
-- which every alr function has, keeps the planner from inlining; none of its callers is hot.)
CREATE OR REPLACE FUNCTION alr._is_blank(p_value text)
RETURNS boolean
LANGUAGE sql
IMMUTABLE
PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
  SELECT p_value !~ '[^\u0009-\u000d\u0020\u0085\u00a0\u1680\u180e\u2000-\u200d\u2028\u2029\u202f\u205f\u2060\u3000\ufeff]';
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
-- Convenience: a new firing alert named `name`; returns its id. A plain INSERT INTO alr.alerts
-- (name) is equally valid: state defaults to 'firing'. The name is the message's text: not blank
-- (alr._is_blank), at most 1000 characters.
CREATE OR REPLACE FUNCTION alr.add_alert(name text)
RETURNS uuid
LANGUAGE plpgsql
VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  v_id uuid;
BEGIN
  -- The length first: a blank name over the cap is not echoed whole in the error.
  IF pg_catalog.length(add_alert.name) > 1000 THEN
    PERFORM alr._invalid('add_alert', pg_catalog.format('name must be at most 1000 characters, got %s characters',
      pg_catalog.length(add_alert.name)));
  END IF;
  IF add_alert.name IS NULL OR alr._is_blank(add_alert.name) THEN
    PERFORM alr._invalid('add_alert', pg_catalog.format('name must be a non-empty text, got %s',
      COALESCE(pg_catalog.quote_literal(add_alert.name), 'NULL')));
  END IF;
  INSERT INTO alr.alerts (id, name) VALUES (core.new_id(), add_alert.name) RETURNING id INTO v_id;
  RETURN v_id;
END;
$$;
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
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  fn constant text := 'acknowledge_alert';
  v_state text;
BEGIN
  IF acknowledge_alert.alert_id IS NULL THEN
    PERFORM alr._invalid(fn, 'alert_id must not be NULL, got NULL');
  END IF;
  IF acknowledge_alert.note IS NOT NULL
     AND (alr._is_blank(acknowledge_alert.note) OR pg_catalog.length(acknowledge_alert.note) > 1000) THEN
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
-- Starts the policy's ladder for a firing alert: step 0 becomes due after its delay. Idempotent:
-- while a ladder of this alert and policy is running, returns that ladder's id (a unique partial
-- index settles concurrent starts; a ladder that completes meanwhile is not returned, a new one is
-- started). An acknowledged alert is refused like a resolved one: someone is on it, and a new
-- ladder would page again.
CREATE OR REPLACE FUNCTION alr.start_escalation(alert_id uuid, policy_id uuid)
RETURNS uuid
LANGUAGE plpgsql
VOLATILE
SET search_path = pg_catalog, pg_temp
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

  -- Insert, or read the running ladder the insert conflicted with. Each statement has its own
  -- snapshot: that ladder may stop between the two (apply_escalation recording its last step; the
  -- alert's lock keeps resolve_alert and acknowledge_alert out), and then there is none to return
  -- and a new one may be started: try again. Each round needs another ladder to stop meanwhile.
  LOOP
    INSERT INTO alr.alert_escalations AS e (id, alert_id, policy_id, step_idx, next_at)
    VALUES (core.new_id(), start_escalation.alert_id, start_escalation.policy_id, 0, pg_catalog.now() + v_delay)
    ON CONFLICT (alert_id, policy_id) WHERE stopped_at IS NULL DO NOTHING
    RETURNING e.id INTO v_id;
    EXIT WHEN v_id IS NOT NULL;
    SELECT e.id INTO v_id FROM alr.alert_escalations e
    WHERE e.alert_id = start_escalation.alert_id AND e.policy_id = start_escalation.policy_id
      AND e.stopped_at IS NULL;
    EXIT WHEN v_id IS NOT NULL;
  END LOOP;
  RETURN v_id;
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- Records that the step is being delivered ("record, then deliver": the caller delivers only after
-- true): advances step_idx and sets next_at from the next step's delay, or stops the ladder after
-- its last step; clears lease and token, keeping the token as the step's element of applied_tokens:
-- the one token record_delivery accepts, once, for this step. Only when lease_token still matches
-- AND the ladder runs AND its alert is still firing; otherwise returns false and changes nothing at
-- all — not next_at, not step_idx, not leased_until (a late instance must not break the current
-- holder's lease).
CREATE OR REPLACE FUNCTION alr.apply_escalation(escalation_id uuid, lease_token uuid)
RETURNS boolean
LANGUAGE plpgsql
VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  fn constant text := 'apply_escalation';
  v_step_idx integer;
  v_policy_id uuid;
  v_next_delay interval;
  v_last boolean;
BEGIN
  PERFORM alr._escalation_known(fn, apply_escalation.escalation_id, apply_escalation.lease_token);
  SELECT e.step_idx, e.policy_id INTO v_step_idx, v_policy_id
  FROM alr.alert_escalations e WHERE e.id = apply_escalation.escalation_id;
  SELECT s.delay INTO v_next_delay FROM alr.escalation_steps s
  WHERE s.policy_id = v_policy_id AND s.step_idx = v_step_idx + 1;
  v_last := NOT FOUND;
  -- The token decides ownership; step_idx = v_step_idx makes the computed next step consistent
  -- with the row that is written (both are re-checked on the locked row version).
  UPDATE alr.alert_escalations e
  SET step_idx = v_step_idx + 1,
      next_at = CASE WHEN v_last THEN NULL ELSE pg_catalog.now() + v_next_delay END,
      stopped_at = CASE WHEN v_last THEN pg_catalog.now() END,
      stop_reason = CASE WHEN v_last THEN 'completed' END,
      leased_until = NULL,
      lease_token = NULL,
      applied_tokens[v_step_idx + 1] = apply_escalation.lease_token
  FROM alr.alerts a
  WHERE e.id = apply_escalation.escalation_id
    AND e.lease_token = apply_escalation.lease_token
    AND e.step_idx = v_step_idx
    AND e.stopped_at IS NULL
    AND a.id = e.alert_id AND a.state = 'firing';
  RETURN FOUND;
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- Journals one delivery of a step that apply_escalation recorded, with error NULL for success,
-- fenced by the token: only the take whose apply_escalation recorded the step (lease_token =
-- the step's element of applied_tokens) journals it, and only once (the element is cleared in the
-- same statement, under the ladder's row lock, so two calls at once can not both pass). Returns the
-- journal row's id, or NULL when refused (another token, or the step is journaled already): a
-- refused call changes nothing. channel, target and alert are read from the ladder, not trusted
-- from the caller. The error is kept to its first 4000 characters (a channel's whole error page
-- could be megabytes).
CREATE OR REPLACE FUNCTION alr.record_delivery(escalation_id uuid, step_idx integer, lease_token uuid,
                                               error text DEFAULT NULL)
RETURNS bigint
LANGUAGE plpgsql
VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  fn constant text := 'record_delivery';
  v_e alr.alert_escalations;
  v_s alr.escalation_steps;
  v_id bigint;
BEGIN
  IF record_delivery.escalation_id IS NULL THEN
    PERFORM alr._invalid(fn, 'escalation_id must not be NULL, got NULL');
  END IF;
  IF record_delivery.lease_token IS NULL THEN
    PERFORM alr._invalid(fn, 'lease_token must not be NULL, got NULL');
  END IF;
  SELECT * INTO v_e FROM alr.alert_escalations e WHERE e.id = record_delivery.escalation_id;
  IF NOT FOUND THEN
    PERFORM alr._not_found(fn, 'escalation_id', 'escalation', record_delivery.escalation_id);
  END IF;
  IF record_delivery.step_idx IS NULL OR record_delivery.step_idx < 0
     OR record_delivery.step_idx >= v_e.step_idx THEN
    PERFORM alr._invalid(fn, pg_catalog.format(
      'step_idx must be a step apply_escalation already recorded (%s), got %s',
      CASE WHEN v_e.step_idx = 0 THEN 'none yet' ELSE pg_catalog.format('0 to %s', v_e.step_idx - 1) END,
      COALESCE(record_delivery.step_idx::text, 'NULL')));
  END IF;
  UPDATE alr.alert_escalations e
  SET applied_tokens[record_delivery.step_idx + 1] = NULL
  WHERE e.id = record_delivery.escalation_id
    AND e.applied_tokens[record_delivery.step_idx + 1] = record_delivery.lease_token;
  IF NOT FOUND THEN
    RETURN NULL;
  END IF;
  SELECT * INTO STRICT v_s FROM alr.escalation_steps s
  WHERE s.policy_id = v_e.policy_id AND s.step_idx = record_delivery.step_idx;
  INSERT INTO alr.delivery_journal (escalation_id, alert_id, step_idx, channel, target, lease_token,
                                    outcome, error)
  VALUES (v_e.id, v_e.alert_id, record_delivery.step_idx, v_s.channel, v_s.target,
          record_delivery.lease_token,
          CASE WHEN record_delivery.error IS NULL THEN 'delivered' ELSE 'failed' END,
          pg_catalog.left(record_delivery.error, 4000))
  RETURNING id INTO v_id;
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

-- The _ helpers (_invalid, _not_found, _escalation_known, _check_span, _is_blank) stay INVOKER and
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
-- validated before anything is written, so a rejected policy leaves no trace.
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
  IF create_policy.name IS NULL OR create_policy.name !~ '[^[:space:]\u00a0\u200b\ufeff]' THEN
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
    IF pg_catalog.jsonb_typeof(v_step -> 'channel') IS DISTINCT FROM 'string'
       OR (v_step ->> 'channel') !~ '[^[:space:]\u00a0\u200b\ufeff]' THEN
      PERFORM alr._invalid(fn, pg_catalog.format('steps[%s].channel must be a non-empty string, got %s',
        v_idx, COALESCE((v_step -> 'channel')::text, 'nothing')));
    END IF;
    IF pg_catalog.jsonb_typeof(v_step -> 'target') IS DISTINCT FROM 'string'
       OR (v_step ->> 'target') !~ '[^[:space:]\u00a0\u200b\ufeff]' THEN
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
-- Convenience: a new firing alert named `name`; returns its id. A plain INSERT INTO alr.alerts
-- (name) is equally valid: state defaults to 'firing'.
CREATE OR REPLACE FUNCTION alr.add_alert(name text)
RETURNS uuid
LANGUAGE plpgsql
VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  v_id uuid;
BEGIN
  IF add_alert.name IS NULL OR add_alert.name !~ '[^[:space:]\u00a0\u200b\ufeff]' THEN
    PERFORM alr._invalid('add_alert', pg_catalog.format('name must be a non-empty text, got %s',
      COALESCE(pg_catalog.quote_literal(add_alert.name), 'NULL')));
  END IF;
  INSERT INTO alr.alerts (id, name) VALUES (core.new_id(), add_alert.name) RETURNING id INTO v_id;
  RETURN v_id;
END;
$$;
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
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  fn constant text := 'acknowledge_alert';
  v_state text;
BEGIN
  IF acknowledge_alert.alert_id IS NULL THEN
    PERFORM alr._invalid(fn, 'alert_id must not be NULL, got NULL');
  END IF;
  IF acknowledge_alert.note IS NOT NULL
     AND (acknowledge_alert.note !~ '[^[:space:]\u00a0\u200b\ufeff]' OR pg_catalog.length(acknowledge_alert.note) > 1000) THEN
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
-- Starts the policy's ladder for a firing alert: step 0 becomes due after its delay. Idempotent:
-- while a ladder of this alert and policy is running, returns that ladder's id (a unique partial
-- index settles concurrent starts). An acknowledged alert is refused like a resolved one: someone is
-- on it, and a new ladder would page again.
CREATE OR REPLACE FUNCTION alr.start_escalation(alert_id uuid, policy_id uuid)
RETURNS uuid
LANGUAGE plpgsql
VOLATILE
SET search_path = pg_catalog, pg_temp
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
-- Records that the step is being delivered ("record, then deliver": the caller delivers only after
-- true): advances step_idx and sets next_at from the next step's delay, or stops the ladder after
-- its last step; clears lease and token. Only when lease_token still matches AND the ladder runs
-- AND its alert is still firing; otherwise returns false and changes nothing at all — not next_at,
-- not step_idx, not leased_until (a late instance must not break the current holder's lease).
CREATE OR REPLACE FUNCTION alr.apply_escalation(escalation_id uuid, lease_token uuid)
RETURNS boolean
LANGUAGE plpgsql
VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  fn constant text := 'apply_escalation';
  v_step_idx integer;
  v_policy_id uuid;
  v_next_delay interval;
  v_last boolean;
BEGIN
  PERFORM alr._escalation_known(fn, apply_escalation.escalation_id, apply_escalation.lease_token);
  SELECT e.step_idx, e.policy_id INTO v_step_idx, v_policy_id
  FROM alr.alert_escalations e WHERE e.id = apply_escalation.escalation_id;
  SELECT s.delay INTO v_next_delay FROM alr.escalation_steps s
  WHERE s.policy_id = v_policy_id AND s.step_idx = v_step_idx + 1;
  v_last := NOT FOUND;
  -- The token decides ownership; step_idx = v_step_idx makes the computed next step consistent
  -- with the row that is written (both are re-checked on the locked row version).
  UPDATE alr.alert_escalations e
  SET step_idx = v_step_idx + 1,
      next_at = CASE WHEN v_last THEN NULL ELSE pg_catalog.now() + v_next_delay END,
      stopped_at = CASE WHEN v_last THEN pg_catalog.now() END,
      stop_reason = CASE WHEN v_last THEN 'completed' END,
      leased_until = NULL,
      lease_token = NULL
  FROM alr.alerts a
  WHERE e.id = apply_escalation.escalation_id
    AND e.lease_token = apply_escalation.lease_token
    AND e.step_idx = v_step_idx
    AND e.stopped_at IS NULL
    AND a.id = e.alert_id AND a.state = 'firing';
  RETURN FOUND;
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- Journals one delivery of a step that apply_escalation recorded (step_idx must already be behind
-- the ladder's current step), with error NULL for success. channel, target and alert are read from
-- the ladder, not trusted from the caller. Returns the journal row's id. The error is kept to its
-- first 4000 characters (a channel's whole error page could be megabytes).
CREATE OR REPLACE FUNCTION alr.record_delivery(escalation_id uuid, step_idx integer, lease_token uuid,
                                               error text DEFAULT NULL)
RETURNS bigint
LANGUAGE plpgsql
VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  fn constant text := 'record_delivery';
  v_e alr.alert_escalations;
  v_s alr.escalation_steps;
  v_id bigint;
BEGIN
  IF record_delivery.escalation_id IS NULL THEN
    PERFORM alr._invalid(fn, 'escalation_id must not be NULL, got NULL');
  END IF;
  IF record_delivery.lease_token IS NULL THEN
    PERFORM alr._invalid(fn, 'lease_token must not be NULL, got NULL');
  END IF;
  SELECT * INTO v_e FROM alr.alert_escalations e WHERE e.id = record_delivery.escalation_id;
  IF NOT FOUND THEN
    PERFORM alr._not_found(fn, 'escalation_id', 'escalation', record_delivery.escalation_id);
  END IF;
  IF record_delivery.step_idx IS NULL OR record_delivery.step_idx < 0
     OR record_delivery.step_idx >= v_e.step_idx THEN
    PERFORM alr._invalid(fn, pg_catalog.format(
      'step_idx must be a step apply_escalation already recorded (0 to %s), got %s',
      v_e.step_idx - 1, COALESCE(record_delivery.step_idx::text, 'NULL')));
  END IF;
  SELECT * INTO STRICT v_s FROM alr.escalation_steps s
  WHERE s.policy_id = v_e.policy_id AND s.step_idx = record_delivery.step_idx;
  INSERT INTO alr.delivery_journal (escalation_id, alert_id, step_idx, channel, target, lease_token,
                                    outcome, error)
  VALUES (v_e.id, v_e.alert_id, record_delivery.step_idx, v_s.channel, v_s.target,
          record_delivery.lease_token,
          CASE WHEN record_delivery.error IS NULL THEN 'delivered' ELSE 'failed' END,
          pg_catalog.left(record_delivery.error, 4000))
  RETURNING id INTO v_id;
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
  SELECT '0.1.0'::text, 9;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
DROP FUNCTION alr._is_blank(text);
-- +goose StatementEnd

-- +goose StatementBegin
-- Back to 00009: the journal is not fenced by the token (record_delivery as before).
ALTER TABLE alr.alert_escalations DROP COLUMN applied_tokens;
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

-- The _ helpers (_invalid, _not_found, _escalation_known, _check_span, _is_blank) stay INVOKER and
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
