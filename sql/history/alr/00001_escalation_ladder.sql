-- +goose Up
-- +goose StatementBegin
-- core: tiny shared helpers (core.new_id); may be shared by other modules, hence IF NOT EXISTS.
CREATE SCHEMA IF NOT EXISTS core;
CREATE SCHEMA alr;
COMMENT ON SCHEMA alr IS 'pgdrain: alert escalation ladder (due steps leased in batches, record then deliver)';

CREATE TABLE alr.alerts (
  id uuid PRIMARY KEY DEFAULT pg_catalog.gen_random_uuid(),
  name text NOT NULL CHECK (name <> ''),
  state text NOT NULL DEFAULT 'firing' CHECK (state IN ('firing', 'resolved')),
  created_at timestamptz NOT NULL DEFAULT pg_catalog.now(),
  resolved_at timestamptz,
  CHECK ((state = 'resolved') = (resolved_at IS NOT NULL))
);
COMMENT ON TABLE alr.alerts IS
  'Alerts that escalate. Insert with alr.add_alert(name) or a plain INSERT (state defaults to firing); '
  'resolve with alr.resolve_alert, which also stops the alert''s ladders.';

CREATE TABLE alr.escalation_policies (
  id uuid PRIMARY KEY DEFAULT pg_catalog.gen_random_uuid(),
  name text NOT NULL CHECK (name <> ''),
  created_at timestamptz NOT NULL DEFAULT pg_catalog.now()
);
COMMENT ON TABLE alr.escalation_policies IS 'Named ladders of steps; created (validated) by alr.create_policy.';

CREATE TABLE alr.escalation_steps (
  policy_id uuid NOT NULL REFERENCES alr.escalation_policies (id) ON DELETE CASCADE,
  step_idx integer NOT NULL CHECK (step_idx >= 0),
  delay interval NOT NULL CHECK (delay >= interval '0'),
  channel text NOT NULL CHECK (channel <> ''),
  target text NOT NULL CHECK (target <> ''),
  PRIMARY KEY (policy_id, step_idx)
);
COMMENT ON TABLE alr.escalation_steps IS 'The ordered steps of a policy, step_idx 0, 1, 2, ... without gaps.';
COMMENT ON COLUMN alr.escalation_steps.delay IS
  'How long after the previous step (after start_escalation for step 0) this step becomes due.';

CREATE TABLE alr.alert_escalations (
  id uuid PRIMARY KEY DEFAULT pg_catalog.gen_random_uuid(),
  alert_id uuid NOT NULL REFERENCES alr.alerts (id) ON DELETE CASCADE,
  policy_id uuid NOT NULL REFERENCES alr.escalation_policies (id),
  step_idx integer NOT NULL DEFAULT 0 CHECK (step_idx >= 0),
  next_at timestamptz,
  stopped_at timestamptz,
  stop_reason text CHECK (stop_reason IN ('resolved', 'completed')),
  leased_until timestamptz,
  created_at timestamptz NOT NULL DEFAULT pg_catalog.now(),
  CHECK ((stopped_at IS NULL) = (stop_reason IS NULL)),
  CHECK (stopped_at IS NULL OR next_at IS NULL)
);
COMMENT ON TABLE alr.alert_escalations IS
  'One running (or finished) ladder of an alert: which step is next and when it is due.';
COMMENT ON COLUMN alr.alert_escalations.step_idx IS
  'Index of the next step to deliver; apply_escalation advances it when it records a delivery.';
COMMENT ON COLUMN alr.alert_escalations.next_at IS
  'When step step_idx is due; NULL once the ladder has stopped.';
COMMENT ON COLUMN alr.alert_escalations.stopped_at IS
  'When the ladder stopped (alert resolved, or its last step recorded); NULL = running.';
COMMENT ON COLUMN alr.alert_escalations.leased_until IS
  'Until when the step is taken into work: while the lease lasts no other instance sees the step.';

-- take_due_steps reads running ladders in next_at order.
CREATE INDEX alert_escalations_due ON alr.alert_escalations (next_at) WHERE stopped_at IS NULL;
CREATE INDEX alert_escalations_alert ON alr.alert_escalations (alert_id);
-- One running ladder per alert and policy: start_escalation is idempotent.
CREATE UNIQUE INDEX alert_escalations_running ON alr.alert_escalations (alert_id, policy_id)
  WHERE stopped_at IS NULL;
-- +goose StatementEnd

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
-- Leases up to batch_size due steps (next_at passed, ladder running, lease free or expired) for
-- `lease`, in next_at order, FOR UPDATE SKIP LOCKED so concurrent instances split the work.
-- The lease only hides a step for a while; apply_escalation records the decision.
CREATE OR REPLACE FUNCTION alr.take_due_steps(batch_size integer DEFAULT 100, lease interval DEFAULT '2 minutes')
RETURNS TABLE(escalation_id uuid, alert_id uuid, step_idx integer, channel text, target text,
              leased_until timestamptz)
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
    SET leased_until = pg_catalog.now() + take_due_steps.lease
    FROM due WHERE e.id = due.id
    RETURNING e.id, e.alert_id, e.policy_id, e.step_idx, e.next_at, e.leased_until
  )
  SELECT t.id, t.alert_id, t.step_idx, s.channel, s.target, t.leased_until
  FROM taken t
  JOIN alr.escalation_steps s ON s.policy_id = t.policy_id AND s.step_idx = t.step_idx
  ORDER BY t.next_at, t.id;
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- Records that the step is being delivered: advances step_idx and sets next_at from the next
-- step's delay, or stops the ladder after its last step; clears the lease. Only while the ladder
-- runs (stopped_at IS NULL) and its alert is still firing; otherwise returns false and changes
-- nothing. The caller delivers only after true.
CREATE OR REPLACE FUNCTION alr.apply_escalation(escalation_id uuid)
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
  IF apply_escalation.escalation_id IS NULL THEN
    PERFORM alr._invalid(fn, 'escalation_id must not be NULL, got NULL');
  END IF;
  SELECT e.step_idx, e.policy_id INTO v_step_idx, v_policy_id
  FROM alr.alert_escalations e WHERE e.id = apply_escalation.escalation_id;
  IF NOT FOUND THEN
    PERFORM alr._not_found(fn, 'escalation_id', 'escalation', apply_escalation.escalation_id);
  END IF;
  SELECT s.delay INTO v_next_delay FROM alr.escalation_steps s
  WHERE s.policy_id = v_policy_id AND s.step_idx = v_step_idx + 1;
  v_last := NOT FOUND;
  -- step_idx = v_step_idx: if another transaction advanced the step meanwhile, the re-checked
  -- row no longer matches and nothing is written.
  UPDATE alr.alert_escalations e
  SET step_idx = v_step_idx + 1,
      next_at = CASE WHEN v_last THEN NULL ELSE pg_catalog.now() + v_next_delay END,
      stopped_at = CASE WHEN v_last THEN pg_catalog.now() END,
      stop_reason = CASE WHEN v_last THEN 'completed' END,
      leased_until = NULL
  FROM alr.alerts a
  WHERE e.id = apply_escalation.escalation_id
    AND e.step_idx = v_step_idx
    AND e.stopped_at IS NULL
    AND a.id = e.alert_id AND a.state = 'firing';
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
  SET stopped_at = pg_catalog.now(), stop_reason = 'resolved', next_at = NULL, leased_until = NULL
  WHERE e.alert_id = resolve_alert.alert_id AND e.stopped_at IS NULL;
END;
$$;
-- +goose StatementEnd

-- +goose Down
-- +goose StatementBegin
DROP SCHEMA alr CASCADE;
DROP FUNCTION IF EXISTS core.new_id();
-- core may be shared by other modules: drop it only when nothing else lives in it.
DO $$
BEGIN
  IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_depend d
                 WHERE d.refclassid = 'pg_catalog.pg_namespace'::pg_catalog.regclass
                   AND d.refobjid = (SELECT n.oid FROM pg_catalog.pg_namespace n WHERE n.nspname = 'core')) THEN
    DROP SCHEMA IF EXISTS core;
  END IF;
END;
$$;
-- +goose StatementEnd
