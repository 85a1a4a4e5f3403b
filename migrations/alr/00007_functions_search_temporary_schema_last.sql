-- +goose Up
-- +goose StatementBegin
-- A new random identifier (uuid v4). One place to change how ids and lease tokens are made; every
-- call returns a fresh value, so a per-row `SET lease_token = core.new_id()` gives each row its own.
CREATE OR REPLACE FUNCTION core.new_id()
RETURNS uuid
LANGUAGE sql
VOLATILE
PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
  SELECT pg_catalog.gen_random_uuid();
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- Validates the (escalation_id, lease_token) pair of apply_escalation and release_step: both
-- non-NULL (a NULL token would mean "free", which no caller holds) and the escalation exists.
CREATE OR REPLACE FUNCTION alr._escalation_known(p_function text, p_escalation_id uuid, p_lease_token uuid)
RETURNS void
LANGUAGE plpgsql
STABLE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
  IF p_escalation_id IS NULL THEN
    PERFORM alr._invalid(p_function, 'escalation_id must not be NULL, got NULL');
  END IF;
  IF p_lease_token IS NULL THEN
    PERFORM alr._invalid(p_function, 'lease_token must not be NULL, got NULL');
  END IF;
  PERFORM 1 FROM alr.alert_escalations e WHERE e.id = p_escalation_id;
  IF NOT FOUND THEN
    PERFORM alr._not_found(p_function, 'escalation_id', 'escalation', p_escalation_id);
  END IF;
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- Raises the ladder's argument error: SQLSTATE 22023, message '<function>: <what is wrong>'.
-- Every validation goes through here so that codes and message shapes stay one API.
CREATE OR REPLACE FUNCTION alr._invalid(p_function text, p_message text)
RETURNS void
LANGUAGE plpgsql
IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
  RAISE EXCEPTION '%: %', p_function, p_message USING ERRCODE = '22023';
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- Raises the ladder's unknown-id error: SQLSTATE P0002 (no_data_found), message
-- '<function>: <argument> must name an existing <what>, got <id>'. Every unknown id uses it.
CREATE OR REPLACE FUNCTION alr._not_found(p_function text, p_argument text, p_what text, p_id uuid)
RETURNS void
LANGUAGE plpgsql
IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
  RAISE EXCEPTION '%: % must name an existing %, got %', p_function, p_argument, p_what, p_id
    USING ERRCODE = 'P0002';
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
  IF add_alert.name IS NULL OR pg_catalog.btrim(add_alert.name) = '' THEN
    PERFORM alr._invalid('add_alert', pg_catalog.format('name must be a non-empty text, got %s',
      COALESCE(pg_catalog.quote_literal(add_alert.name), 'NULL')));
  END IF;
  INSERT INTO alr.alerts (id, name) VALUES (core.new_id(), add_alert.name) RETURNING id INTO v_id;
  RETURN v_id;
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
-- Every channel some policy's steps use, with how many policies use it and how many running ladders
-- still have a step on it (the current step or a later one). An engine compares it with its
-- notifiers at start: a channel nobody serves is a configuration error that would otherwise show
-- only when its first step comes due. Read-only; one walk over the (small) policy tables.
CREATE OR REPLACE FUNCTION alr.channels_in_use()
RETURNS TABLE(channel text, policies bigint, running_ladders bigint)
LANGUAGE sql
STABLE
SET search_path = pg_catalog, pg_temp
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
  IF create_policy.name IS NULL OR pg_catalog.btrim(create_policy.name) = '' THEN
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
    IF pg_catalog.jsonb_typeof(v_step -> 'channel') IS DISTINCT FROM 'string'
       OR pg_catalog.btrim(v_step ->> 'channel') = '' THEN
      PERFORM alr._invalid(fn, pg_catalog.format('steps[%s].channel must be a non-empty string, got %s',
        v_idx, COALESCE((v_step -> 'channel')::text, 'nothing')));
    END IF;
    IF pg_catalog.jsonb_typeof(v_step -> 'target') IS DISTINCT FROM 'string'
       OR pg_catalog.btrim(v_step ->> 'target') = '' THEN
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
-- Journals one delivery of a step that apply_escalation recorded (step_idx must already be behind
-- the ladder's current step), with error NULL for success. channel, target and alert are read from
-- the ladder, not trusted from the caller. Returns the journal row's id.
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
          record_delivery.error)
  RETURNING id INTO v_id;
  RETURN v_id;
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- Gives a taken step back untouched (lease and token cleared, step_idx and next_at kept), so the
-- next take gets it at once instead of after the lease — used by an engine that stops before
-- applying. false (and nothing changed) when the lease is no longer ours.
CREATE OR REPLACE FUNCTION alr.release_step(escalation_id uuid, lease_token uuid)
RETURNS boolean
LANGUAGE plpgsql
VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
  PERFORM alr._escalation_known('release_step', release_step.escalation_id, release_step.lease_token);
  UPDATE alr.alert_escalations e
  SET leased_until = NULL, lease_token = NULL
  WHERE e.id = release_step.escalation_id AND e.lease_token = release_step.lease_token;
  RETURN FOUND;
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- Resolves a firing alert and stops all its running ladders (next_at, lease and token cleared), in
-- one transaction, so a late apply_escalation for any of their steps finds stopped_at set and
-- records nothing. Idempotent: resolving a resolved alert changes nothing.
CREATE OR REPLACE FUNCTION alr.resolve_alert(alert_id uuid)
RETURNS void
LANGUAGE plpgsql
VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  fn constant text := 'resolve_alert';
BEGIN
  IF resolve_alert.alert_id IS NULL THEN
    PERFORM alr._invalid(fn, 'alert_id must not be NULL, got NULL');
  END IF;
  -- Lock order alert, then ladders: the same as start_escalation's.
  PERFORM 1 FROM alr.alerts a WHERE a.id = resolve_alert.alert_id FOR UPDATE;
  IF NOT FOUND THEN
    PERFORM alr._not_found(fn, 'alert_id', 'alert', resolve_alert.alert_id);
  END IF;
  UPDATE alr.alerts a SET state = 'resolved', resolved_at = pg_catalog.now()
  WHERE a.id = resolve_alert.alert_id AND a.state = 'firing';
  UPDATE alr.alert_escalations e
  SET stopped_at = pg_catalog.now(), stop_reason = 'resolved', next_at = NULL, leased_until = NULL,
      lease_token = NULL
  WHERE e.alert_id = resolve_alert.alert_id AND e.stopped_at IS NULL;
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
SET search_path = pg_catalog, pg_temp
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
  SELECT '0.1.0'::text, 7;
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
-- A new random identifier (uuid v4). One place to change how ids and lease tokens are made; every
-- call returns a fresh value, so a per-row `SET lease_token = core.new_id()` gives each row its own.
CREATE OR REPLACE FUNCTION core.new_id()
RETURNS uuid
LANGUAGE sql
VOLATILE
PARALLEL SAFE
SET search_path = ''
AS $$
  SELECT pg_catalog.gen_random_uuid();
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- Validates the (escalation_id, lease_token) pair of apply_escalation and release_step: both
-- non-NULL (a NULL token would mean "free", which no caller holds) and the escalation exists.
CREATE OR REPLACE FUNCTION alr._escalation_known(p_function text, p_escalation_id uuid, p_lease_token uuid)
RETURNS void
LANGUAGE plpgsql
STABLE
SET search_path = ''
AS $$
BEGIN
  IF p_escalation_id IS NULL THEN
    PERFORM alr._invalid(p_function, 'escalation_id must not be NULL, got NULL');
  END IF;
  IF p_lease_token IS NULL THEN
    PERFORM alr._invalid(p_function, 'lease_token must not be NULL, got NULL');
  END IF;
  PERFORM 1 FROM alr.alert_escalations e WHERE e.id = p_escalation_id;
  IF NOT FOUND THEN
    PERFORM alr._not_found(p_function, 'escalation_id', 'escalation', p_escalation_id);
  END IF;
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- Raises the ladder's argument error: SQLSTATE 22023, message '<function>: <what is wrong>'.
-- Every validation goes through here so that codes and message shapes stay one API.
CREATE OR REPLACE FUNCTION alr._invalid(p_function text, p_message text)
RETURNS void
LANGUAGE plpgsql
IMMUTABLE
SET search_path = ''
AS $$
BEGIN
  RAISE EXCEPTION '%: %', p_function, p_message USING ERRCODE = '22023';
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- Raises the ladder's unknown-id error: SQLSTATE P0002 (no_data_found), message
-- '<function>: <argument> must name an existing <what>, got <id>'. Every unknown id uses it.
CREATE OR REPLACE FUNCTION alr._not_found(p_function text, p_argument text, p_what text, p_id uuid)
RETURNS void
LANGUAGE plpgsql
IMMUTABLE
SET search_path = ''
AS $$
BEGIN
  RAISE EXCEPTION '%: % must name an existing %, got %', p_function, p_argument, p_what, p_id
    USING ERRCODE = 'P0002';
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
-- Convenience: a new firing alert named `name`; returns its id. A plain INSERT INTO alr.alerts
-- (name) is equally valid: state defaults to 'firing'.
CREATE OR REPLACE FUNCTION alr.add_alert(name text)
RETURNS uuid
LANGUAGE plpgsql
VOLATILE
SET search_path = ''
AS $$
DECLARE
  v_id uuid;
BEGIN
  IF add_alert.name IS NULL OR pg_catalog.btrim(add_alert.name) = '' THEN
    PERFORM alr._invalid('add_alert', pg_catalog.format('name must be a non-empty text, got %s',
      COALESCE(pg_catalog.quote_literal(add_alert.name), 'NULL')));
  END IF;
  INSERT INTO alr.alerts (id, name) VALUES (core.new_id(), add_alert.name) RETURNING id INTO v_id;
  RETURN v_id;
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
SET search_path = ''
AS $$
  SELECT a.name FROM alr.alerts a WHERE a.id = alert_name.alert_id;
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
SET search_path = ''
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
-- Creates an escalation policy from a JSON array of steps, each exactly
-- {"delay": "<interval>", "channel": "<name>", "target": "<address>"}; returns its id. Everything is
-- validated before anything is written, so a rejected policy leaves no trace.
CREATE OR REPLACE FUNCTION alr.create_policy(name text, steps jsonb)
RETURNS uuid
LANGUAGE plpgsql
VOLATILE
SET search_path = ''
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
  IF create_policy.name IS NULL OR pg_catalog.btrim(create_policy.name) = '' THEN
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
    IF pg_catalog.jsonb_typeof(v_step -> 'channel') IS DISTINCT FROM 'string'
       OR pg_catalog.btrim(v_step ->> 'channel') = '' THEN
      PERFORM alr._invalid(fn, pg_catalog.format('steps[%s].channel must be a non-empty string, got %s',
        v_idx, COALESCE((v_step -> 'channel')::text, 'nothing')));
    END IF;
    IF pg_catalog.jsonb_typeof(v_step -> 'target') IS DISTINCT FROM 'string'
       OR pg_catalog.btrim(v_step ->> 'target') = '' THEN
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
-- Journals one delivery of a step that apply_escalation recorded (step_idx must already be behind
-- the ladder's current step), with error NULL for success. channel, target and alert are read from
-- the ladder, not trusted from the caller. Returns the journal row's id.
CREATE OR REPLACE FUNCTION alr.record_delivery(escalation_id uuid, step_idx integer, lease_token uuid,
                                               error text DEFAULT NULL)
RETURNS bigint
LANGUAGE plpgsql
VOLATILE
SET search_path = ''
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
          record_delivery.error)
  RETURNING id INTO v_id;
  RETURN v_id;
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- Gives a taken step back untouched (lease and token cleared, step_idx and next_at kept), so the
-- next take gets it at once instead of after the lease — used by an engine that stops before
-- applying. false (and nothing changed) when the lease is no longer ours.
CREATE OR REPLACE FUNCTION alr.release_step(escalation_id uuid, lease_token uuid)
RETURNS boolean
LANGUAGE plpgsql
VOLATILE
SET search_path = ''
AS $$
BEGIN
  PERFORM alr._escalation_known('release_step', release_step.escalation_id, release_step.lease_token);
  UPDATE alr.alert_escalations e
  SET leased_until = NULL, lease_token = NULL
  WHERE e.id = release_step.escalation_id AND e.lease_token = release_step.lease_token;
  RETURN FOUND;
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- Resolves a firing alert and stops all its running ladders (next_at, lease and token cleared), in
-- one transaction, so a late apply_escalation for any of their steps finds stopped_at set and
-- records nothing. Idempotent: resolving a resolved alert changes nothing.
CREATE OR REPLACE FUNCTION alr.resolve_alert(alert_id uuid)
RETURNS void
LANGUAGE plpgsql
VOLATILE
SET search_path = ''
AS $$
DECLARE
  fn constant text := 'resolve_alert';
BEGIN
  IF resolve_alert.alert_id IS NULL THEN
    PERFORM alr._invalid(fn, 'alert_id must not be NULL, got NULL');
  END IF;
  -- Lock order alert, then ladders: the same as start_escalation's.
  PERFORM 1 FROM alr.alerts a WHERE a.id = resolve_alert.alert_id FOR UPDATE;
  IF NOT FOUND THEN
    PERFORM alr._not_found(fn, 'alert_id', 'alert', resolve_alert.alert_id);
  END IF;
  UPDATE alr.alerts a SET state = 'resolved', resolved_at = pg_catalog.now()
  WHERE a.id = resolve_alert.alert_id AND a.state = 'firing';
  UPDATE alr.alert_escalations e
  SET stopped_at = pg_catalog.now(), stop_reason = 'resolved', next_at = NULL, leased_until = NULL,
      lease_token = NULL
  WHERE e.alert_id = resolve_alert.alert_id AND e.stopped_at IS NULL;
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
-- Leases up to batch_size due steps (next_at passed, ladder running, lease free or expired) for
-- `lease`, in next_at order, FOR UPDATE SKIP LOCKED so concurrent instances split the work. Every
-- row gets its own fresh lease_token (core.new_id() is evaluated per row in the SET): the lease is
-- only a deadline, the token is ownership, and apply_escalation records only with a matching token.
CREATE OR REPLACE FUNCTION alr.take_due_steps(batch_size integer DEFAULT 100, lease interval DEFAULT '2 minutes')
RETURNS TABLE(escalation_id uuid, alert_id uuid, step_idx integer, channel text, target text,
              lease_token uuid, leased_until timestamptz)
LANGUAGE plpgsql
VOLATILE
SET search_path = ''
AS $$
DECLARE
  fn constant text := 'take_due_steps';
BEGIN
  IF take_due_steps.batch_size IS NULL OR take_due_steps.batch_size < 1 OR take_due_steps.batch_size > 10000 THEN
    PERFORM alr._invalid(fn, pg_catalog.format('batch_size must be between 1 and 10000, got %s',
      COALESCE(take_due_steps.batch_size::text, 'NULL')));
  END IF;
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
