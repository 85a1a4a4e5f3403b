-- +goose Up
-- +goose StatementBegin
-- Steps left unjournaled on ladders of alerts that are resolved or acknowledged no longer matter
-- (nobody is paged for them: alr.unjournaled_steps leaves them out), and kept in the partial index
-- they made its reads grow with every such step ever left. resolve_alert and acknowledge_alert now
-- clear them; this clears those of alerts handled before.
COMMENT ON COLUMN alr.alert_escalations.unjournaled_since IS
  'When the oldest step of this ladder that apply_escalation recorded and record_delivery has not '
  'journaled yet was recorded; NULL when every recorded step is journaled, or once the alert is '
  'resolved or acknowledged. A step unjournaled for longer than its engine''s lease, delivery '
  'timeout and journal retries was probably never delivered (alr.unjournaled_steps).';
UPDATE alr.alert_escalations e SET unjournaled_since = NULL
WHERE e.unjournaled_since IS NOT NULL
  AND (EXISTS (SELECT 1 FROM alr.alerts a WHERE a.id = e.alert_id AND a.state <> 'firing')
       OR EXISTS (SELECT 1 FROM alr.alert_acknowledgements k WHERE k.alert_id = e.alert_id));
-- +goose StatementEnd

-- +goose StatementBegin
-- Resolves a firing alert and stops all its running ladders (next_at, lease and token cleared), in
-- one transaction, so a late apply_escalation for any of their steps finds stopped_at set and
-- records nothing. Its ladders' steps left unjournaled (an engine killed between recording and
-- delivering) leave alr.unjournaled_steps' partial index: they no longer matter (a resolved alert
-- pages nobody), and kept there they made its cost grow with every such step ever left. Their
-- tokens stay: a late record_delivery still journals them. Idempotent: resolving a resolved alert
-- changes nothing.
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
  UPDATE alr.alert_escalations e SET unjournaled_since = NULL
  WHERE e.alert_id = resolve_alert.alert_id AND e.unjournaled_since IS NOT NULL;
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
-- is resolved. Its ladders' steps left unjournaled leave alr.unjournaled_steps (see resolve_alert).
-- Locks the alert, then its ladders: resolve_alert's and start_escalation's order.
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
  UPDATE alr.alert_escalations e SET unjournaled_since = NULL
  WHERE e.alert_id = acknowledge_alert.alert_id AND e.unjournaled_since IS NOT NULL;
  RETURN true;
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
-- acknowledge or resolve the alert). resolve_alert and acknowledge_alert take their ladders off the
-- partial index this reads (unjournaled_since cleared), so its cost grows with the ladders of alerts
-- that still need someone, not with every step ever left unjournaled; the filter here covers alerts
-- an owner resolved by hand.
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
  SELECT '0.1.0'::text, 15;
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
COMMENT ON COLUMN alr.alert_escalations.unjournaled_since IS
  'When the oldest step of this ladder that apply_escalation recorded and record_delivery has not '
  'journaled yet was recorded; NULL when every recorded step is journaled. A step unjournaled for '
  'longer than its engine''s lease, delivery timeout and journal retries was probably never '
  'delivered (alr.unjournaled_steps).';
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
