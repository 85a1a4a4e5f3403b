-- +goose Up
-- +goose StatementBegin
-- Records that the step is being delivered ("record, then deliver": the caller delivers only after
-- true): advances step_idx and sets next_at from the next step's delay, or stops the ladder after
-- its last step; clears lease and token, keeping the token as the step's element of applied_tokens:
-- the one token record_delivery accepts, once, for this step, and the ladder's unjournaled_since
-- when it had no step waiting for its journal. Only when lease_token still matches
-- AND the ladder runs AND its alert is still firing; otherwise returns false and changes nothing at
-- all — not next_at, not step_idx, not leased_until (a late instance must not break the current
-- holder's lease). The next step's delay counts from the clock, not from now() (the transaction's
-- start), as take_due_steps' due times do: a client whose driver opens transactions implicitly
-- (psycopg2, JDBC without autocommit) would otherwise record in a transaction begun long before,
-- and the next step, due its delay after that start, would page at once instead of after its delay.
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
      next_at = CASE WHEN v_last THEN NULL ELSE pg_catalog.clock_timestamp() + v_next_delay END,
      stopped_at = CASE WHEN v_last THEN pg_catalog.now() END,
      stop_reason = CASE WHEN v_last THEN 'completed' END,
      leased_until = NULL,
      lease_token = NULL,
      applied_tokens[v_step_idx + 1] = apply_escalation.lease_token,
      unjournaled_since = COALESCE(e.unjournaled_since, pg_catalog.now())
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
-- Starts the policy's ladder for a firing alert: step 0 becomes due after its delay. Idempotent:
-- while a ladder of this alert and policy is running, returns that ladder's id (a unique partial
-- index settles concurrent starts; a ladder that completes meanwhile is not returned, a new one is
-- started). An acknowledged alert is refused like a resolved one: someone is on it, and a new
-- ladder would page again. Step 0's delay counts from the clock, not from now() (the transaction's
-- start): a producer raising an alert in a transaction open for a while (a driver that opens them
-- implicitly, a long batch) would otherwise have step 0 page at once instead of after its delay.
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
    VALUES (core.new_id(), start_escalation.alert_id, start_escalation.policy_id, 0, pg_catalog.clock_timestamp() + v_delay)
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
-- The steps that apply_escalation recorded and that no record_delivery has journaled since, on
-- ladders whose oldest such step was recorded more than older_than ago: pages probably never sent.
-- An engine records a step, then delivers it, then journals the outcome (seed 000: record, then
-- deliver; at most once), all within its lease, its delivery timeout and its journal retries; one
-- killed in between (SIGKILL, out of memory, a lost host) leaves the step recorded and undelivered,
-- and its ladder goes on to the next step. unjournaled_since is the ladder's oldest such step's
-- record time (one per ladder); channel and target are NULL when the policy's step is gone.
-- Only steps of alerts that still fire and that nobody acknowledged are listed: those are the pages
-- that still matter (what on call is told to do about one: page its target by hand, then
-- acknowledge or resolve the alert). Nothing else takes a step off the list (its token is the only
-- one record_delivery accepts), so a listed step of a resolved or acknowledged alert stayed listed
-- for ever, and the engines' gauge and its page with it.
-- Read-only, through a partial index: its cost grows with such ladders, not with all of them.
CREATE OR REPLACE FUNCTION alr.unjournaled_steps(older_than interval DEFAULT '10 minutes')
RETURNS TABLE(escalation_id uuid, alert_id uuid, step_idx integer, channel text, target text,
              unjournaled_since timestamptz)
LANGUAGE plpgsql
STABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  fn constant text := 'unjournaled_steps';
BEGIN
  PERFORM alr._check_span(fn, 'older_than', unjournaled_steps.older_than);
  IF unjournaled_steps.older_than IS NULL OR unjournaled_steps.older_than < interval '0'
     OR unjournaled_steps.older_than > interval '366 days' THEN
    PERFORM alr._invalid(fn, pg_catalog.format('older_than must be between 0 and 366 days, got %s',
      COALESCE(unjournaled_steps.older_than::text, 'NULL')));
  END IF;
  RETURN QUERY
  SELECT e.id, e.alert_id, (u.i - 1)::integer, s.channel, s.target, e.unjournaled_since
  FROM alr.alert_escalations e
  JOIN alr.alerts a ON a.id = e.alert_id
  CROSS JOIN LATERAL pg_catalog.unnest(e.applied_tokens) WITH ORDINALITY AS u(token, i)
  LEFT JOIN alr.escalation_steps s ON s.policy_id = e.policy_id AND s.step_idx = u.i - 1
  WHERE e.unjournaled_since IS NOT NULL
    AND e.unjournaled_since <= pg_catalog.now() - unjournaled_steps.older_than
    AND u.token IS NOT NULL
    AND a.state = 'firing'
    AND NOT EXISTS (SELECT 1 FROM alr.alert_acknowledgements k WHERE k.alert_id = e.alert_id)
  ORDER BY e.unjournaled_since, e.id, u.i;
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
          'steps[%s] must only have the keys delay, channel, target, got key %s', v_idx,
          -- A key is shown as a value is (alr._shown): a mistaken megabyte is not echoed whole.
          CASE WHEN pg_catalog.length(v_key) > 200
               THEN pg_catalog.format('%s... (%s characters)', pg_catalog.quote_literal(pg_catalog.left(v_key, 200)),
                                      pg_catalog.length(v_key))
               ELSE pg_catalog.quote_literal(v_key) END));
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
-- Journals one delivery of a step that apply_escalation recorded, with error NULL for success,
-- fenced by the token: only the take whose apply_escalation recorded the step (lease_token =
-- the step's element of applied_tokens) journals it, and only once (the element is cleared in the
-- same statement, under the ladder's row lock, so two calls at once can not both pass, and with it
-- the ladder's unjournaled_since when no other step waits for its journal). Returns the
-- journal row's id, or NULL when refused (another token, or the step is journaled already): a
-- refused call changes nothing. channel, target and alert are read from the ladder, not trusted
-- from the caller. A blank error is refused (a failure needs its reason); the error is kept to its
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
  -- A failure journaled without a reason tells on call nothing: say why, or NULL for delivered.
  IF alr._is_blank(record_delivery.error) THEN
    PERFORM alr._invalid(fn, pg_catalog.format(
      'error must be NULL (delivered) or say why the delivery failed, got %s',
      -- Its length, not the text, when long: a megabyte of blanks is not echoed into the error.
      CASE WHEN pg_catalog.length(record_delivery.error) > 200
           THEN pg_catalog.format('a blank text of %s characters', pg_catalog.length(record_delivery.error))
           ELSE pg_catalog.quote_literal(record_delivery.error) END));
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
  SET applied_tokens[record_delivery.step_idx + 1] = NULL,
      -- The oldest record time is kept while another step waits for its journal (conservative:
      -- that step was recorded no later).
      unjournaled_since = CASE WHEN EXISTS (
        SELECT 1 FROM pg_catalog.unnest(e.applied_tokens) WITH ORDINALITY AS u(token, i)
        WHERE u.token IS NOT NULL AND u.i <> record_delivery.step_idx + 1) THEN e.unjournaled_since END
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
  SELECT '0.1.0'::text, 14;
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

-- Steps recorded and never journaled (alr 00013): the engine's gauge, the console and on call.
ALTER FUNCTION alr.unjournaled_steps(interval) SECURITY DEFINER;
GRANT EXECUTE ON FUNCTION alr.unjournaled_steps(interval) TO pgdrain_worker, pgdrain_operator, pgdrain_reader;
-- +goose StatementEnd

-- +goose Down

-- +goose StatementBegin
-- Records that the step is being delivered ("record, then deliver": the caller delivers only after
-- true): advances step_idx and sets next_at from the next step's delay, or stops the ladder after
-- its last step; clears lease and token, keeping the token as the step's element of applied_tokens:
-- the one token record_delivery accepts, once, for this step, and the ladder's unjournaled_since
-- when it had no step waiting for its journal. Only when lease_token still matches
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
      applied_tokens[v_step_idx + 1] = apply_escalation.lease_token,
      unjournaled_since = COALESCE(e.unjournaled_since, pg_catalog.now())
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
-- The steps that apply_escalation recorded and that no record_delivery has journaled since, on
-- ladders whose oldest such step was recorded more than older_than ago: pages probably never sent.
-- An engine records a step, then delivers it, then journals the outcome (seed 000: record, then
-- deliver; at most once), all within its lease, its delivery timeout and its journal retries; one
-- killed in between (SIGKILL, out of memory, a lost host) leaves the step recorded and undelivered,
-- and its ladder goes on to the next step. unjournaled_since is the ladder's oldest such step's
-- record time (one per ladder); channel and target are NULL when the policy's step is gone.
-- Read-only, through a partial index: its cost grows with such ladders, not with all of them.
CREATE OR REPLACE FUNCTION alr.unjournaled_steps(older_than interval DEFAULT '10 minutes')
RETURNS TABLE(escalation_id uuid, alert_id uuid, step_idx integer, channel text, target text,
              unjournaled_since timestamptz)
LANGUAGE plpgsql
STABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  fn constant text := 'unjournaled_steps';
BEGIN
  PERFORM alr._check_span(fn, 'older_than', unjournaled_steps.older_than);
  IF unjournaled_steps.older_than IS NULL OR unjournaled_steps.older_than < interval '0'
     OR unjournaled_steps.older_than > interval '366 days' THEN
    PERFORM alr._invalid(fn, pg_catalog.format('older_than must be between 0 and 366 days, got %s',
      COALESCE(unjournaled_steps.older_than::text, 'NULL')));
  END IF;
  RETURN QUERY
  SELECT e.id, e.alert_id, (u.i - 1)::integer, s.channel, s.target, e.unjournaled_since
  FROM alr.alert_escalations e
  CROSS JOIN LATERAL pg_catalog.unnest(e.applied_tokens) WITH ORDINALITY AS u(token, i)
  LEFT JOIN alr.escalation_steps s ON s.policy_id = e.policy_id AND s.step_idx = u.i - 1
  WHERE e.unjournaled_since IS NOT NULL
    AND e.unjournaled_since <= pg_catalog.now() - unjournaled_steps.older_than
    AND u.token IS NOT NULL
  ORDER BY e.unjournaled_since, e.id, u.i;
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
-- Journals one delivery of a step that apply_escalation recorded, with error NULL for success,
-- fenced by the token: only the take whose apply_escalation recorded the step (lease_token =
-- the step's element of applied_tokens) journals it, and only once (the element is cleared in the
-- same statement, under the ladder's row lock, so two calls at once can not both pass, and with it
-- the ladder's unjournaled_since when no other step waits for its journal). Returns the
-- journal row's id, or NULL when refused (another token, or the step is journaled already): a
-- refused call changes nothing. channel, target and alert are read from the ladder, not trusted
-- from the caller. A blank error is refused (a failure needs its reason); the error is kept to its
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
  -- A failure journaled without a reason tells on call nothing: say why, or NULL for delivered.
  IF alr._is_blank(record_delivery.error) THEN
    PERFORM alr._invalid(fn, pg_catalog.format(
      'error must be NULL (delivered) or say why the delivery failed, got %s', pg_catalog.quote_literal(record_delivery.error)));
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
  SET applied_tokens[record_delivery.step_idx + 1] = NULL,
      -- The oldest record time is kept while another step waits for its journal (conservative:
      -- that step was recorded no later).
      unjournaled_since = CASE WHEN EXISTS (
        SELECT 1 FROM pg_catalog.unnest(e.applied_tokens) WITH ORDINALITY AS u(token, i)
        WHERE u.token IS NOT NULL AND u.i <> record_delivery.step_idx + 1) THEN e.unjournaled_since END
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
  SELECT '0.1.0'::text, 13;
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

-- Steps recorded and never journaled (alr 00013): the engine's gauge, the console and on call.
ALTER FUNCTION alr.unjournaled_steps(interval) SECURITY DEFINER;
GRANT EXECUTE ON FUNCTION alr.unjournaled_steps(interval) TO pgdrain_worker, pgdrain_operator, pgdrain_reader;
-- +goose StatementEnd
